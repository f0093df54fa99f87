//go:build e2e && linux

package acceptance_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lever-jail/lever/internal/acceptance"
	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/testutil"
)

// levForGuest builds cmd/lev, the binary whose `__guest probe` serves acceptance's guest
// side (on the netns substrate it runs in place).
func levForGuest(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "lev")
	cmd := exec.Command("go", "build", "-o", out, "../../cmd/lev")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building lev: %v: %s", err, b)
	}
	return out
}

func must(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
}

// listenIn opens a TCP listener inside the named network namespace (the socket stays in
// the namespace it was made in).
func listenIn(t *testing.T, ns, addr string) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	l, lerr := net.Listen("tcp6", addr)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		panic(err) // this thread is in the wrong namespace: nothing may run on it
	}
	if lerr != nil {
		t.Fatal(lerr)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// The host alias resolving to a global-scope IPv6 address, on the netns substrate: the
// "host" and the global address live in a namespace the test made. A unique-local alias
// passes; a global alias the live chain does not cover is the attack (its probe connects:
// the check fails, naming it); once apply covers it the probe is dropped and it passes.
func TestAliasV6AcceptanceE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	tag := fmt.Sprintf("%d", os.Getpid()%100000)
	hostNS := "lvt-a6h" + tag
	must(t, "ip", "netns", "add", hostNS)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", hostNS).Run() })
	must(t, "ip", "-n", hostNS, "link", "set", "lo", "up")
	b, err := netns.New(netns.Options{Name: "a6" + tag, Prefix: "lvt-", HostNamespace: hostNS, RunUser: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Destroy(context.Background()) })
	ctx := context.Background()
	if err := b.EnsureUp(ctx); err != nil {
		t.Fatal(err)
	}
	const global = "2001:db8::10"
	must(t, "ip", "-n", hostNS, "-6", "addr", "add", global+"/128", "dev", b.HostVeth(), "nodad")
	hv4, hv6 := b.HostAddrs()
	must(t, "ip", "-n", b.Namespace(), "-6", "route", "add", "2001:db8::/64", "via", hv6.String())
	listenIn(t, hostNS, "[::]:9")

	spec := guest.EgressSpec{Posture: egress.Open, Alias: netns.AliasName, Ports: []int{7443}}
	if _, err := guest.EnsureEgress(ctx, b.Runner(), spec); err != nil {
		t.Fatal(err)
	}
	lev := levForGuest(t)
	run := func() (acceptance.Result, acceptance.Result) {
		t.Helper()
		rep, err := acceptance.Run(ctx, acceptance.Env{Instance: "a6", Backend: "netns", Runner: b.Runner(), Egress: spec,
			Expect:    acceptance.Expect{AllowPorts: []int{7443}, DevSubstrate: true, Targets: acceptance.DefaultTargets()},
			HelperLev: lev, HelperInPlace: true})
		if err != nil {
			t.Fatal(err)
		}
		var a6, chains acceptance.Result
		for _, r := range rep.Results {
			switch r.ID {
			case "alias-v6":
				a6 = r
			case "egress-chains":
				chains = r
			}
		}
		return a6, chains
	}
	hosts := filepath.Join(b.EtcDir(), "hosts")
	setV6 := func(a string) {
		t.Helper()
		body := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost\n%s\t%s\n%s\t%s\n", hv4, netns.AliasName, a, netns.AliasName)
		if err := os.WriteFile(hosts, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// 1. the substrate's own alias is unique-local: passes without a probe.
	a6, chains := run()
	if a6.Status != acceptance.Pass || !strings.Contains(a6.Detail, hv6.String()+" is not a global-scope address") || chains.Status != acceptance.Pass {
		t.Fatalf("unique-local alias: %+v / %+v", a6, chains)
	}
	// 2. attack: the alias now resolves to a global address the live chain does not cover.
	setV6(global)
	a6, chains = run()
	if a6.Status != acceptance.Fail || !strings.Contains(a6.Detail, "["+global+"]:9: connected") {
		t.Fatalf("uncovered global alias: %+v, want FAIL with the probe connected", a6)
	}
	if chains.Status != acceptance.Fail || !strings.Contains(chains.Detail, global) {
		t.Errorf("egress-chains should name the missing %s rules: %+v", global, chains)
	}
	// 3. apply covers it: the probe is dropped and the check passes.
	if _, err := guest.EnsureEgress(ctx, b.Runner(), spec); err != nil {
		t.Fatal(err)
	}
	a6, chains = run()
	if a6.Status != acceptance.Pass || !strings.Contains(a6.Detail, global+" is global scope; LEVER_EGRESS covers it") || chains.Status != acceptance.Pass {
		t.Fatalf("covered global alias: %+v / %+v", a6, chains)
	}
}
