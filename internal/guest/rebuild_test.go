package guest_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
)

const rebuildAlias = "host.fake.internal"

// rebuildFixture is a fake guest whose chains are missing (drift), and the answers its
// snapshot parts give for the chains as they are and as desired.
type rebuildFixture struct {
	spec    guest.EgressSpec
	desired egress.Ruleset
}

func newRebuildFixture(t *testing.T) rebuildFixture {
	t.Helper()
	spec := guest.EgressSpec{Posture: egress.Open, Alias: rebuildAlias, Ports: []int{7443}}
	rs, err := egress.Render(egress.Inputs{Posture: egress.Open, Ports: spec.Ports, AliasV4: netip.MustParseAddr("10.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	return rebuildFixture{spec: spec, desired: rs}
}

// snapshotSecs is what snapshot.sh prints for a legacy guest whose chains hold v4 and v6
// (nil: the chain and the jump are missing).
func snapshotSecs(v4, v6 []string) []guesttest.Sec {
	list := func(rules []string) string {
		if rules == nil {
			return "-P OUTPUT ACCEPT"
		}
		return "-P OUTPUT ACCEPT\n-N LEVER_EGRESS\n-A OUTPUT -j LEVER_EGRESS\n" + strings.Join(rules, "\n")
	}
	return []guesttest.Sec{
		{Name: "filter4", Out: list(v4)}, {Name: "filter6", Out: list(v6)},
		{Name: "alias4", Out: "10.0.0.1 STREAM " + rebuildAlias}, {Name: "alias6", RC: 2},
		{Name: "variant", Out: "iptables v1.8.9 (legacy)"},
	}
}

var commitsOK = []guesttest.Sec{{Name: "j6"}, {Name: "j4"}, {Name: "c6"}, {Name: "c4"}}

func cat(parts ...[]guesttest.Sec) []guesttest.Sec {
	var out []guesttest.Sec
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// isRebuild selects the rebuild's call (it carries the commits); the first snapshot
// carries none.
var isRebuild = guesttest.Script("--noflush <<'LEVER_EOF'")

// runner answers the first snapshot with the drifted state and the rebuild's call with
// rebuild; any other call (a separate read-back) is answered as a snapshot of the desired
// state, so only the call count tells a separate read-back apart.
func (f rebuildFixture) runner(rebuild guesttest.Reply) *guesttest.Runner {
	r := &guesttest.Runner{}
	r.On("rebuild", isRebuild, rebuild)
	r.On("snapshot", guesttest.Script("secv filter4"), func(c guest.Cmd) (guest.Result, error) {
		secs := snapshotSecs(nil, nil)
		if len(r.Calls()) > 1 {
			secs = snapshotSecs(f.desired.V4, f.desired.V6)
		}
		return guesttest.Sections(func(guest.Cmd) []guesttest.Sec { return secs })(c)
	})
	return r
}

// TestRebuildIsOneGuestCall: a drifted snapshot leads to exactly ONE further guest call,
// whose script runs the four commits and then the snapshot's parts (with the snapshot's
// inputs), in that order, and whose read-back is what the rebuild is verified from.
func TestRebuildIsOneGuestCall(t *testing.T) {
	f := newRebuildFixture(t)
	r := f.runner(guesttest.Sections(func(guest.Cmd) []guesttest.Sec {
		return cat(commitsOK, snapshotSecs(f.desired.V4, f.desired.V6), []guesttest.Sec{{Name: guest.ReadBackDone}})
	}))
	rep, err := guest.EnsureEgress(context.Background(), r, f.spec)
	if err != nil || rep.Outcome != guest.Rebuilt {
		t.Fatalf("outcome %q, err %v", rep.Outcome, err)
	}
	if got := strings.Join(r.Names(), ","); got != "snapshot,rebuild" {
		t.Fatalf("guest calls %s, want snapshot,rebuild (the read-back rides the rebuild's call)", got)
	}
	c := r.Calls()[1].Cmd
	text := string(c.Stdin)
	order := []string{"\nsec j6 ", "\nsec j4 ", "\nsec c6 ", "\nsec c4 ", "\nsecv filter4 ", "\nsecv filter6 ", "put variant ", "\nput " + guest.ReadBackDone}
	at := 0
	for _, frag := range order {
		i := strings.Index(text[at:], frag)
		if i < 0 {
			t.Fatalf("the rebuild's script lacks %q after offset %d:\n%s", frag, at, text)
		}
		at += i + len(frag)
	}
	if strings.Count(text, "\nsecv filter4 ") != 1 {
		t.Errorf("the snapshot part appears %d times", strings.Count(text, "\nsecv filter4 "))
	}
	// the read-back lists the tables only: the alias, LIMADNS and containment were judged
	// from the first snapshot
	for _, kv := range []string{"LEVER_IPT=iptables", "LEVER_IP6T=ip6tables", "LEVER_ALIAS=" + rebuildAlias, "LEVER_LIMADNS=0", "LEVER_RTKEY=-", "LEVER_READBACK=1"} {
		k, v, _ := strings.Cut(kv, "=")
		if got := guesttest.Env(c, k); got != v {
			t.Errorf("rebuild call's %s = %q, want %q (the read-back's inputs)", k, got, v)
		}
	}
	// the first snapshot may be short (EnsureEgress rebuilds on any drift); the read-back
	// never is: it is what the rebuild is judged by
	if got := guesttest.Env(r.Calls()[0].Cmd, "LEVER_SHORT"); got != "1" {
		t.Errorf("EnsureEgress's snapshot has LEVER_SHORT=%q, want 1", got)
	}
	if got := guesttest.Env(c, "LEVER_SHORT"); got != "" {
		t.Errorf("the read-back has LEVER_SHORT=%q: it must read the nft view", got)
	}
	if got := guesttest.Env(r.Calls()[0].Cmd, "LEVER_READBACK"); got != "" {
		t.Errorf("the first snapshot has LEVER_READBACK=%q: it must read the alias", got)
	}

	// Containment is judged from the first snapshot, before anything changes: a drifted
	// check is refused in that one call, with no rebuild.
	spec := f.spec
	spec.CheckContainment = func(guest.Sections) error { return errors.New("a stray mount") }
	r.Reset()
	if _, err := guest.EnsureEgress(context.Background(), r, spec); !errors.Is(err, guest.ErrContainment) || len(r.Calls()) != 1 {
		t.Errorf("containment drift: err %v after calls %v, want a refusal in the first call", err, r.Names())
	}
}

// TestRebuildFailures: what the one rebuild call's answer leads to. A commit that fails
// (or an answer that stops before the last commit) gives exactly the message ApplyEgress
// gave when the read-back was a call of its own, and no read-back is parsed, even when the
// answer (wrongly) carries one; a read-back that is missing, cut off or unreadable is an
// error, never a match; one that still differs is refused; only the desired chains pass.
// Every case makes exactly the two calls: the snapshot and the rebuild.
func TestRebuildFailures(t *testing.T) {
	f := newRebuildFixture(t)
	good := snapshotSecs(f.desired.V4, f.desired.V6)
	done := []guesttest.Sec{{Name: guest.ReadBackDone}}
	fail := func(step, stderr string) []guesttest.Sec {
		var out []guesttest.Sec
		for _, s := range commitsOK {
			if s.Name == step {
				return append(out, guesttest.Sec{Name: step, RC: 2}, guesttest.Sec{Name: step + ".stderr", Out: stderr})
			}
			out = append(out, s)
		}
		panic(step)
	}
	answer := func(secs []guesttest.Sec) guesttest.Reply {
		return guesttest.Sections(func(guest.Cmd) []guesttest.Sec { return secs })
	}
	exit := func(code int, stderr string, secs []guesttest.Sec) guesttest.Reply {
		return func(c guest.Cmd) (guest.Result, error) {
			res, err := answer(secs)(c)
			res.ExitCode, res.Stderr = code, []byte(stderr)
			return res, err
		}
	}
	// raw answers with secs and then text, cut off as it stands.
	raw := func(secs []guesttest.Sec, text string) guesttest.Reply {
		return func(c guest.Cmd) (guest.Result, error) {
			res, err := answer(secs)(c)
			mark, _ := guesttest.ScriptMark(c)
			res.Stdout = append(res.Stdout, strings.ReplaceAll(text, "{M}", mark)...)
			return res, err
		}
	}
	still := append([]string{"-A LEVER_EGRESS -j ACCEPT"}, f.desired.V4...)
	cases := []struct {
		name  string
		reply guesttest.Reply
		// want is the whole error ("" = success); prefix, when set, is its beginning and
		// want a part of it.
		want, prefix string
		apply        bool // the error wraps guest.ErrApply
	}{
		{"IPv6 jump commit fails", answer(cat(fail("j6", "line 2 failed"), good, done)),
			"applying egress: making the jump first and unique in IPv6 OUTPUT: ip6tables-restore exited 2: line 2 failed; nothing changed", "", true},
		{"IPv4 jump commit fails", answer(cat(fail("j4", "line 3 failed"), good, done)),
			"applying egress: making the jump first and unique in IPv4 OUTPUT: iptables-restore exited 2: line 3 failed; IPv6's jump is first and unique, both families hold their old chains", "", true},
		{"IPv6 chain commit fails", answer(cat(fail("c6", "line 9 failed"), good, done)),
			"applying egress: committing the IPv6 chain: ip6tables-restore exited 2: line 9 failed; both families hold their old chains (the jumps are first and unique)", "", true},
		{"IPv4 chain commit fails", answer(cat(fail("c4", "line 7 failed"), good, done)),
			"applying egress: committing the IPv4 chain: iptables-restore exited 2: line 7 failed; IPv6 holds the new rules and IPv4 the old", "", true},
		{"interrupted after the IPv6 commit", exit(137, "Killed", commitsOK[:3]),
			"applying egress: interrupted after the IPv6 commit (sh exited 137: Killed): IPv6 holds the new rules and IPv4 the old", "", true},
		{"interrupted before the chain commits", exit(137, "Killed", commitsOK[:2]),
			"applying egress: interrupted before the chain commits (sh exited 137: Killed): both families hold their old chains", "", true},
		{"the guest call fails", func(guest.Cmd) (guest.Result, error) { return guest.Result{}, errors.New("ssh: connection lost") },
			"applying egress: the guest call failed (ssh: connection lost); state unknown: IPv6 may hold the new chain and IPv4 the old; the next apply verifies and repairs", "", true},
		{"read-back missing", answer(commitsOK),
			"verifying after the rebuild: the guest's answer ends before the read-back is complete (cut off?)", "", false},
		{"read-back cut off between sections", answer(cat(commitsOK, good[:4])),
			"verifying after the rebuild: the guest's answer ends before the read-back is complete (cut off?)", "", false},
		{"read-back cut off inside a section", raw(cat(commitsOK, good[:1]), "{M}begin filter6\n-P OUTPUT ACCEPT\n"),
			`verifying after the rebuild: guest script output: section "filter6" has no end (cut off?)`, "", false},
		{"the shell dies during the read-back", exit(137, "Killed", cat(commitsOK, good[:2])),
			"verifying after the rebuild: reading egress state from the guest: sh exited 137: Killed", "", false},
		{"the read-back's listing fails", answer(cat(commitsOK, []guesttest.Sec{{Name: "filter4", RC: 4}, {Name: "filter4.stderr", Out: "iptables: Permission denied"}}, good[1:], done)),
			"verifying after the rebuild: listing the IPv4 filter table (iptables -S) exited 4: iptables: Permission denied", "", false},
		{"the read-back still differs", answer(cat(commitsOK, snapshotSecs(still, f.desired.V6), done)),
			"IPv4: extra rule at 1: `-A LEVER_EGRESS -j ACCEPT`", "after the rebuild the live chains still differ from the desired ones: ", false},
		{"the read-back matches", answer(cat(commitsOK, good, done)), "", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.runner(c.reply)
			rep, err := guest.EnsureEgress(context.Background(), r, f.spec)
			if got := strings.Join(r.Names(), ","); got != "snapshot,rebuild" {
				t.Errorf("guest calls %s, want snapshot,rebuild", got)
			}
			if c.want == "" {
				if err != nil || rep.Outcome != guest.Rebuilt {
					t.Fatalf("outcome %q, err %v; want rebuilt", rep.Outcome, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error (outcome %q), want %q", rep.Outcome, c.prefix+c.want)
			}
			if c.prefix != "" && (!strings.HasPrefix(err.Error(), c.prefix) || !strings.Contains(err.Error(), c.want)) ||
				c.prefix == "" && err.Error() != c.want {
				t.Errorf("err:\n  %v\nwant:\n  %s", err, c.prefix+c.want)
			}
			if errors.Is(err, guest.ErrApply) != c.apply {
				t.Errorf("errors.Is(err, ErrApply) = %v, want %v", !c.apply, c.apply)
			}
			if rep.Outcome == guest.Rebuilt {
				t.Errorf("a failed rebuild reported outcome %q", rep.Outcome)
			}
		})
	}
}

// A chainless (short) snapshot carries no nft view, so its rebuild cannot know that OUTPUT
// holds a rule only nft can replace; when the read-back says so, EnsureEgress rebuilds
// once more from the read-back, replacing OUTPUT with nft (three calls). The controls: the
// same read-back after a full snapshot is an error (no second rebuild: that snapshot's
// plan already knew), and a second read-back that still differs is an error too.
func TestChainlessRebuildsOutputFromTheReadBack(t *testing.T) {
	f := newRebuildFixture(t)
	// the read-back of a guest whose nft view cannot be read: every family's OUTPUT is
	// marked for nft's rebuild (and unaccounted for, so it differs)
	unreadable := cat(snapshotSecs(f.desired.V4, f.desired.V6)[:2],
		[]guesttest.Sec{{Name: "variant", Out: "iptables v1.8.9 (nf_tables)"}, {Name: "nft", RC: 1}, {Name: "nft.stderr", Out: "Error: boom"}, {Name: guest.ReadBackDone}})
	clean := cat(snapshotSecs(f.desired.V4, f.desired.V6)[:2], []guesttest.Sec{{Name: "variant", Out: "iptables v1.8.9 (legacy)"}, {Name: guest.ReadBackDone}})
	chainless := []guesttest.Sec{{Name: "filter4", Out: "-P OUTPUT ACCEPT"}, {Name: "filter6", Out: "-P OUTPUT ACCEPT"},
		{Name: "alias4", Out: "10.0.0.1 STREAM " + rebuildAlias}, {Name: "alias6", RC: 2}, {Name: guest.SectionChainless}}
	for _, c := range []struct {
		name      string
		first     []guesttest.Sec
		readBacks [][]guesttest.Sec
		calls     int
		want      string // "" = rebuilt
	}{
		{"chainless, then OUTPUT by nft", chainless, [][]guesttest.Sec{unreadable, clean}, 3, ""},
		{"full snapshot: no second rebuild", snapshotSecs(nil, nil), [][]guesttest.Sec{unreadable, clean}, 2, "still differ"},
		{"chainless, still differing after the second", chainless, [][]guesttest.Sec{unreadable, unreadable}, 3, "still differ"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &guesttest.Runner{}
			rebuilds := 0
			r.On("rebuild", isRebuild, func(cmd guest.Cmd) (guest.Result, error) {
				rb := c.readBacks[rebuilds]
				rebuilds++
				return guesttest.Sections(func(guest.Cmd) []guesttest.Sec { return cat(commitsOK, rb) })(cmd)
			})
			r.On("snapshot", guesttest.Script("secv filter4"), guesttest.Sections(func(guest.Cmd) []guesttest.Sec { return c.first }))
			rep, err := guest.EnsureEgress(context.Background(), r, f.spec)
			if n := len(r.Calls()); n != c.calls {
				t.Errorf("%d guest calls %v, want %d", n, r.Names(), c.calls)
			}
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("err %v, want %q", err, c.want)
				}
				return
			}
			if err != nil || rep.Outcome != guest.Rebuilt {
				t.Fatalf("outcome %q err %v", rep.Outcome, err)
			}
			// the second rebuild replaces OUTPUT with nft, in both families; the first did not
			first, second := string(r.Calls()[1].Cmd.Stdin), string(r.Calls()[2].Cmd.Stdin)
			if strings.Contains(first, "flush chain ip filter OUTPUT") || !strings.Contains(second, "flush chain ip filter OUTPUT") || !strings.Contains(second, "flush chain ip6 filter OUTPUT") {
				t.Errorf("OUTPUT by nft: first rebuild %v, second %v",
					strings.Contains(first, "flush chain ip filter OUTPUT"), strings.Contains(second, "flush chain ip filter OUTPUT"))
			}
		})
	}
}
