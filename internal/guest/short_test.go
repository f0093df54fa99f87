package guest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// shRunner runs a guest Cmd on this machine (the guest's sh is this one's), with PATH
// set to the stand-ins' dir first.
type shRunner struct{ path string }

func (r shRunner) Run(ctx context.Context, c Cmd) (Result, error) {
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Env = []string{"PATH=" + r.path}
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := Result{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode, err = ee.ExitCode(), nil
	}
	return res, err
}

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
			req := SnapshotRequest{Tools: Tools{IPTables: filepath.Join(dir, "ipt4"), IP6Tables: filepath.Join(dir, "ipt6")}, Alias: "h", Short: c.short}
			sc := NewScript(SnapshotParts(req)...)
			res, err := shRunner{dir + ":/usr/bin:/bin"}.Run(context.Background(), sc.Cmd(SnapshotEnv(req)))
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("sh: %v exit %d: %s", err, res.ExitCode, res.Stderr)
			}
			secs, err := sc.Parse(res.Stdout)
			if err != nil {
				t.Fatal(err)
			}
			if got := secs.Has(SectionChainless); got != c.wantChainless {
				t.Fatalf("chainless section %v, want %v:\n%s", got, c.wantChainless, res.Stdout)
			}
			if secs.Has("variant") == c.wantChainless {
				t.Errorf("variant section %v with chainless %v: the nft part ran %s", secs.Has("variant"), c.wantChainless, map[bool]string{true: "anyway", false: "not at all"}[secs.Has("variant")])
			}
			snap, err := ParseSnapshot(secs, req)
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
				if _, err := ParseSnapshot(secs, asked); err == nil || !strings.Contains(err.Error(), "unasked") {
					t.Errorf("a short answer to a full request: err %v", err)
				}
			}
		})
	}
}

// A chainless answer that lists the chain (or says the variant) is not trusted: the
// script never prints one, so it is a forgery or a broken script, and both are errors.
func TestChainlessAnswerChecked(t *testing.T) {
	listing := "-P OUTPUT ACCEPT"
	chain := listing + "\n-N LEVER_EGRESS"
	req := SnapshotRequest{Alias: "h", Short: true}
	for _, c := range []struct {
		name, out, want string
	}{
		{"chain listed", sect("filter4", chain, 0) + sect("filter6", listing, 0) + sect("alias4", "10.0.0.1 STREAM h", 0) + sect(SectionChainless, "", 0), "hold LEVER_EGRESS"},
		{"IPv6 chain listed", sect("filter4", listing, 0) + sect("filter6", chain, 0) + sect("alias4", "10.0.0.1 STREAM h", 0) + sect(SectionChainless, "", 0), "hold LEVER_EGRESS"},
		{"variant read", sect("filter4", listing, 0) + sect("filter6", listing, 0) + sect("alias4", "10.0.0.1 STREAM h", 0) + sect("variant", "iptables v1.8.9 (legacy)", 0) + sect(SectionChainless, "", 0), "hold LEVER_EGRESS or could not be listed"},
		{"control: a true chainless answer", sect("filter4", listing, 0) + sect("filter6", listing, 0) + sect("alias4", "10.0.0.1 STREAM h", 0) + sect(SectionChainless, "", 0), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := TakeSnapshot(context.Background(), fixedRunner{c.out}, req)
			if c.want == "" {
				if err != nil || !s.Chainless {
					t.Fatalf("err %v chainless %v", err, s.Chainless)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}
