package guest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
)

// The snapshot script, run by a real sh with stand-ins for the iptables binaries: a
// Short request on tables that both list and hold no LEVER_EGRESS (a guest just booted)
// is answered without the nft view, and only then. A chain in either family, a listing
// that failed, or a request that is not Short reads the nft view (the positive control:
// the stand-in variant is printed, so the part ran). The answer is read by ParseSnapshot,
// which holds it to the same rule.
func TestSnapshotShortWhenChainless(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	bare := "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT"
	chain := bare + "\n-N LEVER_EGRESS\n-A OUTPUT -j LEVER_EGRESS\n-A LEVER_EGRESS -j DROP"
	cases := []struct {
		name          string
		v4, v6        string
		rc4, rc6      int
		short         bool
		wantChainless bool
		wantErr       string
	}{
		{"just booted, short", bare, bare, 0, 0, true, true, ""},
		{"any mention of the chain reads the whole view", bare + "\n-N LEVER_EGRESS_X", bare, 0, 0, true, false, ""},
		{"the chain in IPv4 only", chain, bare, 0, 0, true, false, ""},
		{"the chain in IPv6 only", bare, chain, 0, 0, true, false, ""},
		{"the chain in both", chain, chain, 0, 0, true, false, ""},
		{"IPv4 listing failed", bare, bare, 1, 0, true, false, "listing the IPv4 filter table"},
		{"IPv6 listing failed", bare, bare, 0, 1, true, false, "listing the IPv6 filter table"},
		{"not asked (a verification)", bare, bare, 0, 0, false, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			stand := func(name, body string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// -V names the legacy variant, so the nft part is the legacy branch; no nft
			// on PATH keeps it off this machine's ruleset
			lister := func(listing string, rc int) string {
				return "case \"$*\" in *-V*) echo 'iptables v1.8.9 (legacy)'; exit 0;; esac\nprintf '%s\\n' '" + strings.ReplaceAll(listing, "\n", "' '") + "'\nexit " + string(rune('0'+rc)) + "\n"
			}
			stand("ipt4", lister(c.v4, c.rc4))
			stand("ipt6", lister(c.v6, c.rc6))
			stand("getent", "echo '10.0.0.1 STREAM h'\n")
			req := guest.SnapshotRequest{Tools: guest.Tools{IPTables: filepath.Join(dir, "ipt4"), IP6Tables: filepath.Join(dir, "ipt6")}, Alias: "h", Short: c.short}
			sc := guest.NewScript(guest.SnapshotParts(req)...)
			res, err := guesttest.Local{Env: []string{"PATH=" + dir + ":/usr/bin:/bin"}}.Run(context.Background(), sc.Cmd(guest.SnapshotEnv(req)))
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("sh: %v exit %d: %s", err, res.ExitCode, res.Stderr)
			}
			secs, err := sc.Parse(res.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			if got := secs.Has(guest.SectionChainless); got != c.wantChainless {
				t.Fatalf("chainless section %v, want %v:\n%s", got, c.wantChainless, res.Stdout)
			}
			if secs.Has("variant") == c.wantChainless {
				t.Errorf("variant section %v with chainless %v: the nft part ran %s", secs.Has("variant"), c.wantChainless, map[bool]string{true: "anyway", false: "not at all"}[secs.Has("variant")])
			}
			snap, err := guest.ParseSnapshot(secs, req)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || snap.Chainless != c.wantChainless {
				t.Fatalf("snapshot chainless %v err %v, want %v", snap.Chainless, err, c.wantChainless)
			}
			// the same short answer read for a request that did not ask for it is refused
			if c.wantChainless {
				asked := req
				asked.Short = false
				if _, err := guest.ParseSnapshot(secs, asked); err == nil || !strings.Contains(err.Error(), "unasked") {
					t.Errorf("a short answer to a full request: err %v", err)
				}
			}
		})
	}
}
