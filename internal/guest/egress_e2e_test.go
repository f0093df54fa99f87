//go:build e2e && linux

package guest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/testutil"
)

// jail is one test jail: a netns-backend guest whose veth's host side lives in a second
// namespace the test made (so every address traffic goes to is in a test namespace), on
// one iptables variant, with restore wrappers that count commits and can be made to fail.
type jail struct {
	t         testing.TB
	variant   string
	b         *netns.Backend
	hostNS    string
	tools     guest.Tools
	list4     string
	list6     string
	dir       string
	a4, a6    netip.Addr
	runner    *guest.Counting
	gveth     string
	hostsOrig []byte
}

func (j *jail) commits() int {
	b, _ := os.ReadFile(filepath.Join(j.dir, "commits.log"))
	return strings.Count(string(b), "\n")
}

// ipt runs an iptables command of the jail's variant in the guest, as a tamperer would.
func (j *jail) ipt(fam egress.Family, args ...string) {
	j.t.Helper()
	tool := j.list4
	if fam == egress.V6 {
		tool = j.list6
	}
	argv := append([]string{"netns", "exec", j.b.Namespace(), tool, "-w"}, args...)
	if out, err := exec.Command("ip", argv...).CombinedOutput(); err != nil {
		j.t.Fatalf("%s %s: %v: %s", tool, strings.Join(args, " "), err, out)
	}
}

func (j *jail) output(fam egress.Family) []string {
	j.t.Helper()
	tool := j.list4
	if fam == egress.V6 {
		tool = j.list6
	}
	out, err := exec.Command("ip", "netns", "exec", j.b.Namespace(), tool, "-w", "-S", "OUTPUT").Output()
	if err != nil {
		j.t.Fatalf("listing OUTPUT: %v", err)
	}
	tb, err := egress.ParseTable(string(out))
	if err != nil {
		j.t.Fatal(err)
	}
	return tb.Rules["OUTPUT"]
}

func sh(t testing.TB, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
}

const wrapper = `#!/bin/sh
# counts restore commits and, when %[3]s (or %[3]s-jump) exists, breaks chain (or
# jump) commits with a bad line so the real %[1]s fails them (and only them); when
# %[3]s-extra exists, chain commits carry one more (valid) rule, which the real
# %[1]s commits
in=$(cat)
echo %[2]s >>%[4]s
if [ -e %[3]s-extra ] && printf '%%s\n' "$in" | grep -q '^:LEVER_EGRESS'; then
	in=$(printf '%%s\n' "$in" | sed 's|^COMMIT$|-A LEVER_EGRESS -d 198.51.100.7/32 -j ACCEPT\nCOMMIT|')
fi
if [ -e %[3]s ] && printf '%%s\n' "$in" | grep -q '^:LEVER_EGRESS'; then
	in=$(printf '%%s\n' "$in" | sed 's/^COMMIT$/-A LEVER_EGRESS -j NO_SUCH_TARGET_FAULT\nCOMMIT/')
fi
if [ -e %[3]s-jump ] && printf '%%s\n' "$in" | grep -q '^-I OUTPUT 1'; then
	in=$(printf '%%s\n' "$in" | sed 's/^COMMIT$/-A OUTPUT -j NO_SUCH_TARGET_FAULT\nCOMMIT/')
fi
printf '%%s\n' "$in" | %[1]s "$@"
`

var jailSeq atomic.Int32

func newJail(t testing.TB, variant string) *jail {
	t.Helper()
	tag := fmt.Sprintf("%d%s%d", os.Getpid()%100000, variant[:1], jailSeq.Add(1))
	j := &jail{t: t, variant: variant, hostNS: "lvt-eh" + tag, dir: t.TempDir()}
	real := guest.DefaultTools()
	j.list4, j.list6 = "iptables-nft", "ip6tables-nft"
	real4, real6 := "iptables-nft-restore", "ip6tables-nft-restore"
	if variant == "legacy" {
		real = guest.LegacyTools()
		j.list4, j.list6 = real.IPTables, real.IP6Tables
		real4, real6 = real.IPTablesRestore, real.IP6TablesRestore
	}
	for _, tool := range []string{j.list4, j.list6, real4, real6} {
		testutil.RequireTool(t, tool)
	}
	w4, w6 := filepath.Join(j.dir, "restore4"), filepath.Join(j.dir, "restore6")
	log := filepath.Join(j.dir, "commits.log")
	os.WriteFile(w4, []byte(fmt.Sprintf(wrapper, real4, "v4", filepath.Join(j.dir, "fail4"), log)), 0o755)
	os.WriteFile(w6, []byte(fmt.Sprintf(wrapper, real6, "v6", filepath.Join(j.dir, "fail6"), log)), 0o755)
	j.tools = guest.Tools{IPTables: j.list4, IP6Tables: j.list6, IPTablesRestore: w4, IP6TablesRestore: w6}

	sh(t, "ip", "netns", "add", j.hostNS)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", j.hostNS).Run() })
	sh(t, "ip", "-n", j.hostNS, "link", "set", "lo", "up")
	b, err := netns.New(netns.Options{Name: "g" + tag, Prefix: "lvt-e", HostNamespace: j.hostNS, RunUser: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	j.b = b
	t.Cleanup(func() { b.Destroy(context.Background()) })
	if err := b.EnsureUp(context.Background()); err != nil {
		t.Fatal(err)
	}
	j.a4, j.a6 = b.HostAddrs()
	j.runner = &guest.Counting{Inner: b.Runner()}
	j.hostsOrig, _ = os.ReadFile(filepath.Join(b.EtcDir(), "hosts"))

	// The guest's side of the veth, to route test ranges into the host namespace.
	out, err := exec.Command("ip", "-n", b.Namespace(), "-o", "link", "show", "type", "veth").Output()
	if err != nil || len(strings.Fields(string(out))) < 2 {
		t.Fatalf("finding the guest veth: %v %q", err, out)
	}
	j.gveth = strings.SplitN(strings.TrimSuffix(strings.Fields(string(out))[1], ":"), "@", 2)[0]
	hv := b.HostVeth()
	// Stand-ins, all in the host-side namespace: the metadata address, a neighbouring
	// link-local address, a private-range address, an "internet" address, per family.
	for _, a := range []string{"169.254.169.254/32", "169.254.169.253/32", "192.168.77.1/32", "203.0.113.10/32"} {
		sh(t, "ip", "-n", j.hostNS, "addr", "add", a, "dev", hv)
	}
	for _, a := range []string{"fdff::1/128", "fe80::77/128", "2001:db8::10/128"} {
		sh(t, "ip", "-n", j.hostNS, "-6", "addr", "add", a, "dev", hv, "nodad")
	}
	for _, r := range []string{"169.254.0.0/16", "192.168.77.0/24", "203.0.113.0/24"} {
		sh(t, "ip", "-n", b.Namespace(), "route", "add", r, "dev", j.gveth)
	}
	for _, r := range []string{"fdff::/64", "2001:db8::/64"} {
		sh(t, "ip", "-n", b.Namespace(), "-6", "route", "add", r, "dev", j.gveth)
	}
	// Listeners per port and family in the host namespace answer on every address.
	for _, p := range []string{"7443", "7444", "80"} {
		listenIn(t, j.hostNS, "tcp4", "0.0.0.0:"+p)
		listenIn(t, j.hostNS, "tcp6", "[::]:"+p)
	}
	listenIn(t, b.Namespace(), "tcp4", "127.0.0.1:9999")
	listenIn(t, b.Namespace(), "tcp6", "[::1]:9999")
	// Wait, with no firewall yet, until every stand-in answers once. A fresh veth's first
	// IPv6 neighbour discovery can take longer than a probe's 400 ms on a loaded machine
	// (CI saw the first IPv6 probe time out); the scenario's control then measures the
	// stand-ins, not the link coming up.
	for _, a := range []string{"169.254.169.254:80", "192.168.77.1:80", "203.0.113.10:80", hp(j.a4, 7444),
		"[fdff::1]:80", "[fe80::77%" + j.gveth + "]:80", "[2001:db8::10]:80", hp(j.a6, 7444)} {
		for deadline := time.Now().Add(10 * time.Second); ; {
			got, _, err := dialFrom(b.Namespace(), a)
			if err == nil && got == Connected {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("stand-in %s never answered before any firewall: %s %v", a, got, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return j
}

// spec is the config under test.
func (j *jail) spec(p egress.Posture, ports ...int) guest.EgressSpec {
	return guest.EgressSpec{Posture: p, Alias: netns.AliasName, Ports: ports, Tools: j.tools}
}

// apply runs EnsureEgress while a poller reads both families' OUTPUT as fast as it can;
// once a family's jump has been seen, any later listing without it fails the test. (A
// tampering that removed the jump is the test's doing, before the apply starts; lever's
// own commits must never leave OUTPUT without it.)
func (j *jail) apply(spec guest.EgressSpec) (guest.Report, int, error) {
	j.t.Helper()
	var stop atomic.Bool
	var polls atomic.Int64
	var wg sync.WaitGroup
	var bad []string
	var mu sync.Mutex
	// Each poller's first read happens before any commit: the apply waits for both (a
	// fixed pause could end before either read on a loaded machine, and an apply as quick
	// as the unchanged path could then end with no read at all).
	var first sync.WaitGroup
	for _, tool := range []string{j.list4, j.list6} {
		wg.Add(1)
		first.Add(1)
		go func() {
			defer wg.Done()
			seen, firstDone := false, false
			defer func() {
				if !firstDone {
					first.Done()
				}
			}()
			for !stop.Load() {
				out, err := exec.Command("ip", "netns", "exec", j.b.Namespace(), tool, "-w", "-S", "OUTPUT").Output()
				if err != nil {
					continue
				}
				polls.Add(1)
				if !firstDone {
					firstDone = true
					first.Done()
				}
				has := strings.Contains(string(out), "\n"+egress.JumpRule+"\n")
				seen = seen || has
				if seen && !has {
					mu.Lock()
					bad = append(bad, tool+": "+string(out))
					mu.Unlock()
				}
			}
		}()
	}
	firstRead := make(chan struct{})
	go func() { first.Wait(); close(firstRead) }()
	select {
	case <-firstRead:
	case <-time.After(30 * time.Second):
		j.t.Errorf("a jump poller did not read OUTPUT within 30 s of starting")
	}
	j.runner.Reset()
	rep, err := guest.EnsureEgress(context.Background(), j.runner, spec)
	calls := int(j.runner.Calls())
	stop.Store(true)
	wg.Wait()
	if len(bad) > 0 {
		j.t.Errorf("OUTPUT was without the jump during an apply (%d of %d polls):\n%s", len(bad), polls.Load(), bad[0])
	}
	if polls.Load() == 0 {
		j.t.Errorf("the jump poller never read OUTPUT")
	}
	return rep, calls, err
}

func (j *jail) verify(spec guest.EgressSpec) []string {
	j.t.Helper()
	rep, err := guest.VerifyEgress(context.Background(), j.b.Runner(), spec)
	if err != nil {
		j.t.Fatalf("verify: %v", err)
	}
	return rep.Diff.Lines()
}

func (j *jail) mustRebuild(spec guest.EgressSpec, wantLines []string) {
	j.t.Helper()
	before := j.commits()
	rep, calls, err := j.apply(spec)
	if err != nil {
		j.t.Fatalf("apply: %v", err)
	}
	if rep.Outcome != guest.Rebuilt {
		j.t.Fatalf("outcome %q, want rebuilt", rep.Outcome)
	}
	if d := cmp.Diff(wantLines, rep.Lines); wantLines != nil && d != "" {
		j.t.Errorf("rebuild reported differences (-want +got):\n%s", d)
	}
	if n := j.commits() - before; n != 4 {
		j.t.Errorf("repair made %d restore commits, want 4 (jump and chain per family)", n)
	}
	if calls != 2 {
		j.t.Errorf("repair path took %d guest calls, want 2 (snapshot; apply with its read-back)", calls)
	}
	if lines := j.verify(spec); len(lines) != 0 {
		j.t.Fatalf("after the repair verify still reports: %q", lines)
	}
}

func (j *jail) mustBeUnchanged(spec guest.EgressSpec) {
	j.t.Helper()
	before := j.commits()
	rep, calls, err := j.apply(spec)
	if err != nil {
		j.t.Fatalf("apply: %v", err)
	}
	if rep.Outcome != guest.Unchanged {
		j.t.Fatalf("outcome %q (%q), want unchanged", rep.Outcome, rep.Lines)
	}
	if n := j.commits() - before; n != 0 {
		j.t.Errorf("unchanged re-apply made %d restore commits, want 0", n)
	}
	if calls != 1 {
		j.t.Errorf("unchanged path took %d guest calls, want 1", calls)
	}
}

type probe struct {
	addr string
	want string
}

func (j *jail) traffic(probes []probe) {
	j.t.Helper()
	for _, p := range probes {
		got, took, err := dialFrom(j.b.Namespace(), p.addr)
		// A probe's 400 ms can run out on a loaded machine before an answer that comes in
		// well under a millisecond otherwise: a timeout where an answer is wanted is tried
		// again, twice. A DROP times out every time, so it still fails.
		for retry := 0; err == nil && got == TimedOut && p.want != TimedOut && retry < 2; retry++ {
			j.t.Logf("connect %-28s %-16s in %v; trying again", p.addr, got, took.Round(10*time.Microsecond))
			got, took, err = dialFrom(j.b.Namespace(), p.addr)
		}
		if err != nil {
			j.t.Errorf("%s: %v", p.addr, err)
			continue
		}
		j.t.Logf("connect %-28s %-16s in %v", p.addr, got, took.Round(10*time.Microsecond))
		if got != p.want {
			j.t.Errorf("connect %s: %s, want %s", p.addr, got, p.want)
		}
	}
}

func hp(a netip.Addr, port int) string { return net.JoinHostPort(a.String(), fmt.Sprint(port)) }

func TestEgressE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	for _, variant := range []string{"nft", "legacy"} {
		t.Run(variant, func(t *testing.T) { egressScenario(t, variant) })
	}
}

func egressScenario(t *testing.T, variant string) {
	j := newJail(t, variant)
	a4, a6 := j.a4.String(), j.a6.String()
	ll := "[fe80::77%" + j.gveth + "]:80"
	r4 := func(s string) string { return "-A LEVER_EGRESS " + s }
	open := j.spec(egress.Open, 7443)

	// Control: with no firewall every stand-in answers, so what changes below is the
	// firewall's doing.
	j.traffic([]probe{
		{"169.254.169.254:80", Connected}, {"169.254.169.253:80", Connected}, {"192.168.77.1:80", Connected},
		{"203.0.113.10:80", Connected}, {hp(j.a4, 7444), Connected}, {"[fdff::1]:80", Connected},
		{ll, Connected}, {"[2001:db8::10]:80", Connected}, {hp(j.a6, 7444), Connected},
	})

	t.Run("first apply", func(t *testing.T) {
		j.t = t
		j.mustRebuild(open, []string{
			"IPv4: chain LEVER_EGRESS missing", "IPv4: jump missing from OUTPUT",
			"IPv6: chain LEVER_EGRESS missing", "IPv6: jump missing from OUTPUT",
		})
	})
	t.Run("unchanged re-apply", func(t *testing.T) { j.t = t; j.mustBeUnchanged(open) })
	t.Run("traffic open", func(t *testing.T) {
		j.t = t
		j.traffic([]probe{
			{"169.254.169.254:80", Unreachable}, {"169.254.169.253:80", TimedOut}, {"192.168.77.1:80", TimedOut},
			{hp(j.a4, 7443), Connected}, {hp(j.a4, 7444), TimedOut}, {"203.0.113.10:80", Connected},
			{hp(j.a6, 7443), Connected}, {hp(j.a6, 7444), TimedOut}, {"[fdff::1]:80", TimedOut},
			{ll, TimedOut}, {"[2001:db8::10]:80", Connected},
		})
	})

	v4 := egress.V4
	v6 := egress.V6
	tampers := []struct {
		name   string
		tamper func()
		spec   guest.EgressSpec
		want   []string
		after  func(t *testing.T)
	}{
		{"rule added", func() { j.ipt(v4, "-I", "LEVER_EGRESS", "2", "-d", "203.0.113.10/32", "-j", "ACCEPT") }, open,
			[]string{"IPv4: extra rule at 2: `-A LEVER_EGRESS -d 203.0.113.10/32 -j ACCEPT`", "half-applied: IPv6 holds the desired chain, IPv4 does not"}, nil},
		{"rule removed", func() { j.ipt(v4, "-D", "LEVER_EGRESS", "-d", "192.168.0.0/16", "-j", "DROP") }, open,
			[]string{"IPv4: rule 6 missing: `-A LEVER_EGRESS -d 192.168.0.0/16 -j DROP`", "half-applied: IPv6 holds the desired chain, IPv4 does not"}, nil},
		{"rule changed", func() {
			j.ipt(v4, "-R", "LEVER_EGRESS", "1", "-d", a4+"/32", "-p", "tcp", "--dport", "7444", "-j", "ACCEPT")
		}, open,
			[]string{"IPv4: rule 1 changed: want `" + r4("-d "+a4+"/32 -p tcp -m tcp --dport 7443 -j ACCEPT") + "`, got `" + r4("-d "+a4+"/32 -p tcp -m tcp --dport 7444 -j ACCEPT") + "`", "half-applied: IPv6 holds the desired chain, IPv4 does not"}, nil},
		{"rule reordered", func() {
			j.ipt(v4, "-D", "LEVER_EGRESS", "-d", "10.0.0.0/8", "-j", "DROP")
			j.ipt(v4, "-A", "LEVER_EGRESS", "-d", "10.0.0.0/8", "-j", "DROP")
		}, open, []string{"IPv4: rule reordered: `-A LEVER_EGRESS -d 10.0.0.0/8 -j DROP` wanted at 4, found at 12", "half-applied: IPv6 holds the desired chain, IPv4 does not"}, nil},
		{"jump removed", func() { j.ipt(v6, "-D", "OUTPUT", "-j", "LEVER_EGRESS") }, open,
			[]string{"IPv6: jump missing from OUTPUT"}, nil},
		{"jump moved down", func() {
			j.ipt(v4, "-D", "OUTPUT", "-j", "LEVER_EGRESS")
			j.ipt(v4, "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT")
			j.ipt(v4, "-A", "OUTPUT", "-j", "LEVER_EGRESS")
		}, open, []string{"IPv4: jump not first in OUTPUT; ahead of it: `-A OUTPUT -o lo -j ACCEPT`"}, func(t *testing.T) {
			// The other rule stays, behind the jump.
			if d := cmp.Diff([]string{egress.JumpRule, "-A OUTPUT -o lo -j ACCEPT"}, j.output(v4)); d != "" {
				t.Errorf("OUTPUT after repair (-want +got):\n%s", d)
			}
			j.ipt(v4, "-D", "OUTPUT", "-o", "lo", "-j", "ACCEPT")
		}},
		{"jump duplicated", func() {
			j.ipt(v4, "-A", "OUTPUT", "-j", "LEVER_EGRESS")
			j.ipt(v4, "-A", "OUTPUT", "-j", "LEVER_EGRESS")
		}, open,
			[]string{"IPv4: jump duplicated in OUTPUT (3 copies)"}, func(t *testing.T) {
				if d := cmp.Diff([]string{egress.JumpRule}, j.output(v4)); d != "" {
					t.Errorf("OUTPUT after repair (-want +got):\n%s", d)
				}
			}},
		{"rule ahead of the jump", func() { j.ipt(v6, "-I", "OUTPUT", "1", "-d", "2001:db8::10/128", "-j", "ACCEPT") }, open,
			[]string{"IPv6: jump not first in OUTPUT; ahead of it: `-A OUTPUT -d 2001:db8::10/128 -j ACCEPT`"}, func(t *testing.T) {
				if d := cmp.Diff([]string{egress.JumpRule, "-A OUTPUT -d 2001:db8::10/128 -j ACCEPT"}, j.output(v6)); d != "" {
					t.Errorf("OUTPUT after repair (-want +got):\n%s", d)
				}
				j.ipt(v6, "-D", "OUTPUT", "-d", "2001:db8::10/128", "-j", "ACCEPT")
			}},
		{"chain deleted", func() {
			j.ipt(v4, "-D", "OUTPUT", "-j", "LEVER_EGRESS")
			j.ipt(v4, "-F", "LEVER_EGRESS")
			j.ipt(v4, "-X", "LEVER_EGRESS")
		}, open, []string{"IPv4: chain LEVER_EGRESS missing", "IPv4: jump missing from OUTPUT", "half-applied: IPv6 holds the desired chain, IPv4 does not"}, nil},
		{"only IPv6 changed", func() { j.ipt(v6, "-D", "LEVER_EGRESS", "-d", "fe80::/10", "-j", "DROP") }, open,
			[]string{"IPv6: rule 8 missing: `-A LEVER_EGRESS -d fe80::/10 -j DROP`", "half-applied: IPv4 holds the desired chain, IPv6 does not"}, nil},
		{"port added to the config", func() {}, j.spec(egress.Open, 7443, 9000),
			[]string{
				"IPv4: rule 2 missing: `" + r4("-d "+a4+"/32 -p tcp -m tcp --dport 9000 -j ACCEPT") + "`",
				"IPv6: rule 7 missing: `" + r4("-d "+a6+"/128 -p tcp -m tcp --dport 9000 -j ACCEPT") + "`",
			}, nil},
		{"posture switched to closed", func() {}, j.spec(egress.Closed, 7443, 9000),
			[]string{
				"IPv4: rule 1 missing: `-A LEVER_EGRESS -o lo -j ACCEPT`", "IPv4: rule 15 missing: `-A LEVER_EGRESS -j DROP`",
				"IPv6: rule 1 missing: `-A LEVER_EGRESS -o lo -j ACCEPT`", "IPv6: rule 13 missing: `-A LEVER_EGRESS -j DROP`",
			}, func(t *testing.T) {
				j.traffic([]probe{
					{"203.0.113.10:80", TimedOut}, {"[2001:db8::10]:80", TimedOut},
					{"127.0.0.1:9999", Connected}, {"[::1]:9999", Connected},
					{hp(j.a4, 7443), Connected}, {hp(j.a6, 7443), Connected}, {hp(j.a4, 7444), TimedOut},
					{"169.254.169.254:80", Unreachable}, {"169.254.169.253:80", TimedOut}, {"192.168.77.1:80", TimedOut},
				})
			}},
		{"alias changed", func() {
			os.WriteFile(filepath.Join(j.b.EtcDir(), "hosts"), []byte("10.233.255.201 "+netns.AliasName+"\n"), 0o644)
		}, j.spec(egress.Closed, 7443, 9000), []string{
			"IPv4: rule 2 changed: want `" + r4("-d 10.233.255.201/32 -p tcp -m tcp --dport 7443 -j ACCEPT") + "`, got `" + r4("-d "+a4+"/32 -p tcp -m tcp --dport 7443 -j ACCEPT") + "`",
			"IPv4: rule 3 changed: want `" + r4("-d 10.233.255.201/32 -p tcp -m tcp --dport 9000 -j ACCEPT") + "`, got `" + r4("-d "+a4+"/32 -p tcp -m tcp --dport 9000 -j ACCEPT") + "`",
			"IPv4: rule 5 changed: want `" + r4("-d 10.233.255.201/32 -j DROP") + "`, got `" + r4("-d "+a4+"/32 -j DROP") + "`",
			// The IPv6 alias went away with it: its ND rules too.
			"IPv6: extra rule at 5: `" + r4("-d "+a6+"/128 -p ipv6-icmp -m icmp6 --icmpv6-type 135 -m hl --hl-eq 255 -j ACCEPT") + "`",
			"IPv6: extra rule at 6: `" + r4("-d "+a6+"/128 -p ipv6-icmp -m icmp6 --icmpv6-type 136 -m hl --hl-eq 255 -j ACCEPT") + "`",
			"IPv6: extra rule at 7: `" + r4("-d "+a6+"/128 -p tcp -m tcp --dport 7443 -j ACCEPT") + "`",
			"IPv6: extra rule at 8: `" + r4("-d "+a6+"/128 -p tcp -m tcp --dport 9000 -j ACCEPT") + "`",
			"IPv6: extra rule at 9: `" + r4("-d "+a6+"/128 -j DROP") + "`",
		}, func(t *testing.T) {
			// Back to the real alias for what follows.
			os.WriteFile(filepath.Join(j.b.EtcDir(), "hosts"), j.hostsOrig, 0o644)
			j.t = t
			j.mustRebuild(j.spec(egress.Closed, 7443, 9000), nil) // checked lines: the tamper's
		}},
	}
	for _, tc := range tampers {
		t.Run("tamper/"+tc.name, func(t *testing.T) {
			j.t = t
			tc.tamper()
			if d := cmp.Diff(tc.want, j.verify(tc.spec)); d != "" {
				t.Errorf("verify (-want +got):\n%s", d)
			}
			j.mustRebuild(tc.spec, tc.want)
			if tc.after != nil {
				tc.after(t)
			}
			j.mustBeUnchanged(tc.spec)
		})
	}
	closed := j.spec(egress.Closed, 7443, 9000)
	t.Run("closed lookup fails: aliases read back", func(t *testing.T) {
		j.t = t
		os.WriteFile(filepath.Join(j.b.EtcDir(), "hosts"), []byte("127.0.0.1 localhost\n"), 0o644)
		defer os.WriteFile(filepath.Join(j.b.EtcDir(), "hosts"), j.hostsOrig, 0o644)
		before := j.commits()
		rep, _, err := j.apply(closed)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Outcome != guest.Unchanged || rep.Desired.AliasSource != guest.AliasFromLiveChain {
			t.Errorf("outcome %q from %q", rep.Outcome, rep.Desired.AliasSource)
		}
		if w := strings.Join(rep.Desired.Warnings, "\n"); !strings.Contains(w, "IPv4 "+a4+", IPv6 "+a6) {
			t.Errorf("warning does not name the aliases: %q", w)
		}
		if n := j.commits() - before; n != 0 {
			t.Errorf("%d commits", n)
		}
	})
	t.Run("open or absent chain and lookup fails: refused, nothing changed", func(t *testing.T) {
		j.t = t
		j.mustRebuild(open, nil)
		hosts := filepath.Join(j.b.EtcDir(), "hosts")
		os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"), 0o644)
		defer os.WriteFile(hosts, j.hostsOrig, 0o644)
		before := j.commits()
		if _, _, err := j.apply(j.spec(egress.Open, 7443, 9001)); err == nil || !strings.Contains(err.Error(), "live IPv4 chain is open") {
			t.Errorf("open chain: err = %v", err)
		}
		for _, f := range []egress.Family{v4, v6} {
			j.ipt(f, "-D", "OUTPUT", "-j", "LEVER_EGRESS")
			j.ipt(f, "-F", "LEVER_EGRESS")
			j.ipt(f, "-X", "LEVER_EGRESS")
		}
		rep, err := guest.EnsureEgress(context.Background(), j.b.Runner(), j.spec(egress.Closed, 7443))
		if err == nil || !strings.Contains(err.Error(), "live IPv4 chain is absent") {
			t.Errorf("absent chain: err = %v (%+v)", err, rep)
		}
		if n := j.commits() - before; n != 0 {
			t.Errorf("a refused apply made %d commits", n)
		}
		os.WriteFile(hosts, j.hostsOrig, 0o644)
		j.mustRebuild(open, nil)
	})

	t.Run("fault: IPv4 commit fails after IPv6", func(t *testing.T) {
		j.t = t
		next := j.spec(egress.Open, 7443, 9002)
		fail := filepath.Join(j.dir, "fail4")
		os.WriteFile(fail, nil, 0o644)
		_, _, err := j.apply(next)
		os.Remove(fail)
		if err == nil || !strings.Contains(err.Error(), "committing the IPv4 chain") || !strings.Contains(err.Error(), "IPv6 holds the new rules and IPv4 the old") {
			t.Fatalf("err = %v", err)
		}
		t.Logf("error: %v", err)
		want := []string{
			"IPv4: rule 2 missing: `" + r4("-d "+a4+"/32 -p tcp -m tcp --dport 9002 -j ACCEPT") + "`",
			"half-applied: IPv6 holds the desired chain, IPv4 does not",
		}
		if d := cmp.Diff(want, j.verify(next)); d != "" {
			t.Errorf("verify after the failure (-want +got):\n%s", d)
		}
		j.mustRebuild(next, want)
	})
	t.Run("fault: IPv6 commit fails first", func(t *testing.T) {
		j.t = t
		next := j.spec(egress.Open, 7443)
		fail := filepath.Join(j.dir, "fail6")
		os.WriteFile(fail, nil, 0o644)
		_, _, err := j.apply(next)
		os.Remove(fail)
		if err == nil || !strings.Contains(err.Error(), "committing the IPv6 chain") || !strings.Contains(err.Error(), "both families hold their old chains") {
			t.Fatalf("err = %v", err)
		}
		want := []string{
			"IPv4: extra rule at 2: `" + r4("-d "+a4+"/32 -p tcp -m tcp --dport 9002 -j ACCEPT") + "`",
			"IPv6: extra rule at 7: `" + r4("-d "+a6+"/128 -p tcp -m tcp --dport 9002 -j ACCEPT") + "`",
		}
		if d := cmp.Diff(want, j.verify(next)); d != "" {
			t.Errorf("verify after the failure (-want +got):\n%s", d)
		}
		j.mustRebuild(next, want)
	})
	t.Run("fault: IPv4 jump commit fails", func(t *testing.T) {
		j.t = t
		j.ipt(v4, "-A", "OUTPUT", "-j", "LEVER_EGRESS") // a duplicate to repair
		j.ipt(v6, "-A", "OUTPUT", "-j", "LEVER_EGRESS")
		fail := filepath.Join(j.dir, "fail4-jump")
		os.WriteFile(fail, nil, 0o644)
		_, _, err := j.apply(open)
		os.Remove(fail)
		if err == nil || !strings.Contains(err.Error(), "making the jump first and unique in IPv4 OUTPUT") || !strings.Contains(err.Error(), "IPv6's jump is first and unique, both families hold their old chains") {
			t.Fatalf("err = %v", err)
		}
		got := j.verify(open)
		if d := cmp.Diff([]string{"IPv4: jump duplicated in OUTPUT (2 copies)"}, got); d != "" {
			t.Errorf("verify after the failure (-want +got):\n%s", d)
		}
		j.mustRebuild(open, got)
	})
	// The read-back that verifies a rebuild runs in the apply's own call, after the
	// commits: a commit that succeeds but leaves the chain other than desired (here the
	// IPv4 restore is fed one rule more) is caught in that same call, from the real tables.
	t.Run("fault: the commits succeed, the chain read back differs", func(t *testing.T) {
		j.t = t
		next := j.spec(egress.Open, 7443, 9003)
		extra := filepath.Join(j.dir, "fail4-extra")
		os.WriteFile(extra, nil, 0o644)
		before := j.commits()
		_, calls, err := j.apply(next)
		os.Remove(extra)
		const prefix = "after the rebuild the live chains still differ from the desired ones: "
		if err == nil || errors.Is(err, guest.ErrApply) || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), "IPv4: extra rule at ") || !strings.Contains(err.Error(), "`-A LEVER_EGRESS -d 198.51.100.7/32 -j ACCEPT`") {
			t.Fatalf("err = %v", err)
		}
		t.Logf("error: %v", err)
		if calls != 2 {
			t.Errorf("%d guest calls, want 2 (snapshot; apply with its read-back)", calls)
		}
		if n := j.commits() - before; n != 4 {
			t.Errorf("%d restore commits, want 4", n)
		}
		j.mustRebuild(next, nil)
	})
}

// BenchmarkBringUpEgress measures the bring-up's egress step on real iptables: the
// unchanged path (must be one guest call, no commit) and the repair path (a rule deleted
// before each iteration), reporting guest round-trips and restore commits per bring-up.
func BenchmarkBringUpEgress(b *testing.B) {
	testutil.RequireRoot(b)
	for _, variant := range []string{"nft", "legacy"} {
		j := newJail(b, variant)
		spec := j.spec(egress.Open, 7443, 8080)
		spec.RoundTrips = guest.FileRoundTrips{Path: filepath.Join(b.TempDir(), "nft-roundtrip")} // as bring-up does
		if _, err := guest.EnsureEgress(context.Background(), j.runner, spec); err != nil {
			b.Fatal(err)
		}
		run := func(b *testing.B, tamper func()) {
			var calls, commits int64
			for b.Loop() {
				if tamper != nil {
					b.StopTimer()
					tamper()
					b.StartTimer()
				}
				j.runner.Reset()
				c0 := j.commits()
				rep, err := guest.EnsureEgress(context.Background(), j.runner, spec)
				if err != nil {
					b.Fatal(err)
				}
				if (tamper == nil) != (rep.Outcome == guest.Unchanged) {
					b.Fatalf("outcome %s", rep.Outcome)
				}
				calls += j.runner.Calls()
				commits += int64(j.commits() - c0)
			}
			b.ReportMetric(float64(calls)/float64(b.N), "guest-calls/op")
			b.ReportMetric(float64(commits)/float64(b.N), "restore-commits/op")
		}
		b.Run(variant+"/unchanged", func(b *testing.B) { run(b, nil) })
		b.Run(variant+"/repair", func(b *testing.B) {
			run(b, func() { j.t = b; j.ipt(egress.V4, "-D", "LEVER_EGRESS", "1") })
		})
	}
}

// TestEgressLimaResolverE2E: on a Lima-shaped guest (a LIMADNS nat chain rewriting
// 192.168.5.3:53 to the alias), the open posture ACCEPTs exactly the DNAT targets read
// from the live chain, so DNS over TCP reaches the host-side resolver; a new resolver port
// (as after a Lima reboot) is drift that the next apply repairs; the closed posture emits
// no resolver rule and the same connect times out.
func TestEgressLimaResolverE2E(t *testing.T) {
	testutil.RequireRoot(t)
	j := newJail(t, "nft")
	ns := j.b.Namespace()
	a4 := j.a4.String()
	nat := func(args ...string) {
		sh(t, append([]string{"ip", "netns", "exec", ns, j.list4, "-w", "-t", "nat"}, args...)...)
	}
	setDNAT := func(port int) {
		nat("-F", "LIMADNS")
		for _, p := range []string{"udp", "tcp"} {
			nat("-A", "LIMADNS", "-d", "192.168.5.3/32", "-p", p, "--dport", "53", "-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", a4, port))
		}
	}
	nat("-N", "LIMADNS")
	nat("-A", "OUTPUT", "-j", "LIMADNS")
	setDNAT(35845)
	sh(t, "ip", "-n", ns, "route", "add", "192.168.5.0/24", "dev", j.gveth)
	listenIn(t, j.hostNS, "tcp4", "0.0.0.0:35845")
	listenIn(t, j.hostNS, "tcp4", "0.0.0.0:35846")

	spec := j.spec(egress.Open, 7443)
	spec.Lima, spec.ReplyPorts = true, []int{22}
	rep, _, err := j.apply(spec)
	if err != nil || rep.Outcome != guest.Rebuilt {
		t.Fatalf("apply: %v %+v", err, rep)
	}
	want := []string{
		"-A LEVER_EGRESS -d " + a4 + "/32 -p tcp -m tcp --dport 7443 -j ACCEPT",
		"-A LEVER_EGRESS -d " + a4 + "/32 -p tcp -m tcp --dport 35845 -j ACCEPT",
		"-A LEVER_EGRESS -d " + a4 + "/32 -p udp -m udp --dport 35845 -j ACCEPT",
		"-A LEVER_EGRESS -d " + a4 + "/32 -p tcp -m tcp --sport 22 -m conntrack --ctstate ESTABLISHED -j ACCEPT",
	}
	if d := cmp.Diff(want, rep.Desired.Ruleset.V4[:4]); d != "" {
		t.Errorf("resolver rules (-want +got):\n%s", d)
	}
	j.traffic([]probe{{"192.168.5.3:53", Connected}, {hp(j.a4, 35846), TimedOut}})

	setDNAT(35846) // Lima picked a new port
	lines := j.verify(spec)
	wantLines := []string{
		"IPv4: rule 2 changed: want `-A LEVER_EGRESS -d " + a4 + "/32 -p tcp -m tcp --dport 35846 -j ACCEPT`, got `-A LEVER_EGRESS -d " + a4 + "/32 -p tcp -m tcp --dport 35845 -j ACCEPT`",
		"IPv4: rule 3 changed: want `-A LEVER_EGRESS -d " + a4 + "/32 -p udp -m udp --dport 35846 -j ACCEPT`, got `-A LEVER_EGRESS -d " + a4 + "/32 -p udp -m udp --dport 35845 -j ACCEPT`",
		"half-applied: IPv6 holds the desired chain, IPv4 does not",
	}
	if d := cmp.Diff(wantLines, lines); d != "" {
		t.Errorf("verify after the resolver moved (-want +got):\n%s", d)
	}
	j.mustRebuild(spec, wantLines)
	j.traffic([]probe{{"192.168.5.3:53", Connected}})

	closed := spec
	closed.Posture = egress.Closed
	rep, _, err = j.apply(closed)
	if err != nil || rep.Outcome != guest.Rebuilt {
		t.Fatalf("closed apply: %v %+v", err, rep)
	}
	if s := strings.Join(rep.Desired.Ruleset.V4, "\n"); strings.Contains(s, "35846") {
		t.Errorf("closed posture emitted the resolver target:\n%s", s)
	}
	j.traffic([]probe{{"192.168.5.3:53", TimedOut}})
}

// Rules written with nft that `iptables -S` misprints or cannot print at all. Each row
// tampers a verified jail with nft, then: verify reports drift naming the rule, the
// iptables listing alone (what lever compared before the nft cross-check) is shown to be
// blind or refusing (the positive control: the payload reaches the code the fix is in),
// apply repairs it, and verify is clean again.
func TestEgressNFTUntranslatableE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft")
	j := newJail(t, "nft")
	open := j.spec(egress.Open, 7443)
	// As bring-up does: the round trip is remembered, so an unchanged listing skips it; the
	// look-alike row shows a rule that leaves the listing unchanged is still caught.
	open.RoundTrips = guest.FileRoundTrips{Path: filepath.Join(t.TempDir(), "nft-roundtrip")}
	j.mustRebuild(open, nil)
	a4 := j.a4.String()
	nft := func(args ...string) {
		t.Helper()
		sh(t, append([]string{"ip", "netns", "exec", j.b.Namespace(), "nft"}, args...)...)
	}
	// iptablesOnly is the verdict of the iptables listing alone (nft findings removed).
	iptablesOnly := func() (match bool, err error) {
		snap, err := guest.TakeSnapshot(context.Background(), j.b.Runner(), guest.SnapshotRequest{Tools: j.tools, Alias: netns.AliasName})
		if err != nil {
			return false, err
		}
		for _, st := range []*egress.FamilyState{&snap.V4, &snap.V6} {
			if st.Unlisted != "" {
				return false, fmt.Errorf("iptables refused: %s", st.Unlisted)
			}
			st.Unaccounted = nil
		}
		snap.Foreign = nil // also an nft view (ForeignRedirects), not the iptables listing
		return snap.VerifyEgress(mustPlan(t, open, snap)).Match(), nil
	}
	cases := []struct {
		name   string
		tamper func()
		// want: a drift line must contain each of these
		want []string
		// blind: the iptables listing alone says "match" (the rule is invisible to it);
		// refuses: iptables -S fails on the table. Neither: it sees something else.
		blind, refuses bool
	}{
		{"numgen in the chain (iptables refuses the table)", func() {
			nft("add", "rule", "ip", "filter", "LEVER_EGRESS", "numgen", "random", "mod", "2", "0", "accept")
		}, []string{"IPv4: iptables cannot list the filter table", "`numgen random mod 2 0 accept`"}, false, true},
		{"numgen in ip6", func() {
			nft("insert", "rule", "ip6", "filter", "LEVER_EGRESS", "numgen", "random", "mod", "2", "0", "accept")
		}, []string{"IPv6: iptables cannot list the filter table", "`numgen random mod 2 0 accept`"}, false, true},
		{"numgen ahead of the jump in OUTPUT", func() {
			nft("insert", "rule", "ip", "filter", "OUTPUT", "numgen", "random", "mod", "2", "0", "accept")
		}, []string{"IPv4: iptables cannot list the filter table", "OUTPUT holds `numgen random mod 2 0 accept`"}, false, true},
		{"concatenated set (prints as -p tcp -j ACCEPT)", func() {
			nft("add", "set", "ip", "filter", "lvt", "{ type ipv4_addr . inet_service; elements = { 192.168.77.1 . 80 }; }")
			nft("insert", "rule", "ip", "filter", "LEVER_EGRESS", "ip", "daddr", ".", "tcp", "dport", "@lvt", "accept")
		}, []string{"LEVER_EGRESS rule 1 `ip daddr . tcp dport @lvt accept` is listed by iptables -S as a different rule"}, false, false},
		{"the broker rule replaced by a look-alike that rewrites the destination", func() {
			out, err := exec.Command("ip", "netns", "exec", j.b.Namespace(), "nft", "-a", "list", "chain", "ip", "filter", "LEVER_EGRESS").Output()
			if err != nil {
				t.Fatal(err)
			}
			h := ""
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "dport 7443") && strings.Contains(l, "# handle ") {
					h = strings.TrimSpace(l[strings.LastIndex(l, "# handle ")+len("# handle "):])
				}
			}
			if h == "" {
				t.Fatalf("no broker rule in %s", out)
			}
			nft("replace", "rule", "ip", "filter", "LEVER_EGRESS", "handle", h, "ip", "daddr", a4, "tcp", "dport", "7443", "ip", "daddr", "set", "192.168.77.1", "accept")
		}, []string{"`ip daddr " + a4 + " tcp dport 7443 ip daddr set 192.168.77.1 accept` is listed by iptables -S as a different rule"}, true, false},
		{"the filter table made dormant", func() {
			nft("add", "table", "ip", "filter", "{ flags dormant; }")
		}, []string{"IPv4: not accounted for by iptables -S: the filter table's attributes differ"}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j.t = t
			if lines := j.verify(open); len(lines) != 0 {
				t.Fatalf("not clean before tampering: %q", lines)
			}
			c.tamper()
			match, err := iptablesOnly()
			switch {
			case c.refuses && (err == nil || !strings.Contains(err.Error(), "incompatible")):
				t.Errorf("control: iptables -S should refuse the table, got match=%v err=%v", match, err)
			case c.blind && (err != nil || !match):
				t.Errorf("control: the iptables listing alone should see nothing, got match=%v err=%v", match, err)
			case !c.blind && !c.refuses && (err != nil || match):
				t.Errorf("control: the iptables listing alone should differ, got match=%v err=%v", match, err)
			}
			lines := strings.Join(j.verify(open), "\n")
			for _, w := range c.want {
				if !strings.Contains(lines, w) {
					t.Errorf("verify does not name %q:\n%s", w, lines)
				}
			}
			j.runner.Reset()
			rep, err := guest.EnsureEgress(context.Background(), j.runner, open)
			if err != nil || rep.Outcome != guest.Rebuilt {
				t.Fatalf("apply: outcome %q err %v", rep.Outcome, err)
			}
			if n := j.runner.Calls(); n != 2 {
				t.Errorf("repair took %d guest calls, want 2 (snapshot; apply with its read-back)", n)
			}
			if lines := j.verify(open); len(lines) != 0 {
				t.Fatalf("after apply verify still reports: %q", lines)
			}
			j.mustBeUnchanged(open)
		})
	}
}

// A guest with no LEVER_EGRESS (one just booted) is read without the nft view (a short
// snapshot) and rebuilt in two calls. When its OUTPUT already holds a rule written with nft
// that iptables -S misprints, the short snapshot cannot know OUTPUT must be replaced; the
// rebuild's read-back does, and one more rebuild from it replaces OUTPUT with nft: three
// calls, and the jail verifies clean. The control is the same start without the nft rule:
// two calls.
func TestEgressChainlessE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft")
	for _, c := range []struct {
		name      string
		nftOutput bool
		calls     int64
	}{
		{"bare tables, the control", false, 2},
		{"OUTPUT holds a rule iptables misprints", true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := newJail(t, "nft")
			open := j.spec(egress.Open, 7443)
			nft := func(args ...string) {
				t.Helper()
				sh(t, append([]string{"ip", "netns", "exec", j.b.Namespace(), "nft"}, args...)...)
			}
			nft("add", "table", "ip", "filter")
			nft("add", "chain", "ip", "filter", "OUTPUT", "{ type filter hook output priority 0; policy accept; }")
			if c.nftOutput {
				nft("add", "set", "ip", "filter", "lvt", "{ type ipv4_addr . inet_service; elements = { 192.168.77.1 . 80 }; }")
				nft("add", "rule", "ip", "filter", "OUTPUT", "ip", "daddr", ".", "tcp", "dport", "@lvt", "accept")
			}
			// the snapshot a bring-up takes first is short here (the positive control that
			// the rows below start from the path under test)
			snap, err := guest.TakeSnapshot(context.Background(), j.b.Runner(), open.RebuildRequest())
			if err != nil || !snap.Chainless {
				t.Fatalf("first snapshot: chainless %v err %v, want a short one", snap.Chainless, err)
			}
			j.runner.Reset()
			rep, err := guest.EnsureEgress(context.Background(), j.runner, open)
			if err != nil || rep.Outcome != guest.Rebuilt {
				t.Fatalf("apply: outcome %q err %v", rep.Outcome, err)
			}
			if n := j.runner.Calls(); n != c.calls {
				t.Errorf("%d guest calls, want %d", n, c.calls)
			}
			if lines := j.verify(open); len(lines) != 0 {
				t.Fatalf("after apply verify reports: %q", lines)
			}
			j.mustBeUnchanged(open)
		})
	}
}

func mustPlan(t *testing.T, spec guest.EgressSpec, snap guest.Snapshot) egress.Ruleset {
	t.Helper()
	d, err := guest.PlanEgress(spec, snap)
	if err != nil {
		t.Fatal(err)
	}
	return d.Ruleset
}
