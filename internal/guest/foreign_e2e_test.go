//go:build e2e && linux

package guest_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/testutil"
)

// TestEgressForeignLegacyE2E: on a guest whose iptables is the legacy variant, the kernel
// still runs nf_tables rules beside it. A `postrouting` payload rewrite of the allowed
// alias:7445 to the private-range stand-in 192.168.77.1:80 (which LEVER_EGRESS drops),
// with the replies rewritten back, is a working connection past the chain. Control: the
// direct connection is dropped, and the iptables-legacy listing alone still matches.
// Verify names the rule; apply fails naming it; once the table is gone both are clean.
func TestEgressForeignLegacyE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "nft")
	j := newJail(t, "legacy")
	spec := j.spec(egress.Closed, 7443, 7445)
	if _, _, err := j.apply(spec); err != nil {
		t.Fatal(err)
	}
	if lines := j.verify(spec); len(lines) != 0 {
		t.Fatalf("not clean: %q", lines)
	}
	j.traffic([]probe{{hp(j.a4, 7445), Refused}, {"192.168.77.1:80", TimedOut}})
	nftIn := func(script string) {
		cmd := exec.Command("ip", "netns", "exec", j.b.Namespace(), "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v %s", err, o)
		}
	}
	a := j.a4.String()
	nftIn("add table ip lvx\n" +
		"add chain ip lvx p { type filter hook postrouting priority 0; }\n" +
		"add rule ip lvx p ip daddr " + a + " tcp dport 7445 ip daddr set 192.168.77.1 tcp dport set 80\n" +
		"add chain ip lvx in { type filter hook prerouting priority 0; }\n" +
		"add rule ip lvx in ip saddr 192.168.77.1 tcp sport 80 ip saddr set " + a + " tcp sport set 7445\n")
	defer exec.Command("ip", "netns", "exec", j.b.Namespace(), "nft", "delete", "table", "ip", "lvx").Run()
	// The escape is real: the allowed port now reaches the dropped address.
	j.traffic([]probe{{hp(j.a4, 7445), Connected}, {"192.168.77.1:80", TimedOut}})
	snap, err := guest.TakeSnapshot(context.Background(), j.b.Runner(), guest.SnapshotRequest{Tools: j.tools, Alias: spec.Alias})
	if err != nil {
		t.Fatal(err)
	}
	d := snap.VerifyEgress(mustPlan(t, spec, snap))
	if !d.OwnMatch() || snap.V4.NFTables {
		t.Fatalf("control: the legacy listing alone should match (own match %v, nftables %v): %q", d.OwnMatch(), snap.V4.NFTables, d.Lines())
	}
	lines := strings.Join(j.verify(spec), "\n")
	want := "table ip lvx chain p: `ip daddr " + a + " tcp dport 7445 ip daddr set 192.168.77.1 tcp dport set 80`"
	if !strings.Contains(lines, "routes around LEVER_EGRESS: "+want) || !strings.Contains(lines, "table ip lvx chain in:") {
		t.Errorf("verify does not name the rules:\n%s", lines)
	}
	if _, err := guest.EnsureEgress(context.Background(), j.b.Runner(), spec); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("apply: %v, want a failure naming %q", err, want)
	}
	exec.Command("ip", "netns", "exec", j.b.Namespace(), "nft", "delete", "table", "ip", "lvx").Run()
	if lines := j.verify(spec); len(lines) != 0 {
		t.Errorf("verify once the table is gone: %q", lines)
	}
	j.traffic([]probe{{hp(j.a4, 7445), Refused}})
}
