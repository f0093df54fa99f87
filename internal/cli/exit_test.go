package cli

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestExitStatusAndMessage: lever's exit statuses and its "lever: " line come from
// internal/exitcode through Main: a plain error exits 2 with its message, a status-only
// exit (broker status on a stopped broker) prints nothing more, and success prints
// nothing on stderr.
func TestExitStatusAndMessage(t *testing.T) {
	cfg := egressConfig(t, "open")
	brokerCfg, _ := brokerInstance(t)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string // exact
	}{
		{"success", []string{"version"}, 0, ""},
		{"status only", []string{"broker", "status", "-c", brokerCfg}, 1, ""},
		{"plain error", []string{"egress", "plan", "-c", cfg, "--alias-v4", "nope"}, 2, `lever: --alias-v4 "nope": ParseAddr("nope"): unable to parse IP` + "\n"},
		{"config error", []string{"egress", "plan", filepath.Join(t.TempDir(), "absent.yaml"), "--alias-v4", "10.0.0.1"}, 2, ""},
		{"cobra's own error", []string{"no-such-command"}, 2, `lever: unknown command "no-such-command" for "lever"` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(tc.args, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tc.code, errb.String())
			}
			switch {
			case tc.name == "config error":
				// The loader's message names the file; lever prefixes it, one line.
				if !strings.HasPrefix(errb.String(), "lever: ") || !strings.Contains(errb.String(), "absent.yaml") || strings.Count(errb.String(), "\n") != 1 {
					t.Errorf("stderr %q", errb.String())
				}
			case errb.String() != tc.stderr:
				t.Errorf("stderr %q, want %q", errb.String(), tc.stderr)
			}
		})
	}
}

// TestEgressPlanOfflineJSON: the offline plan's JSON says the alias came from the flag,
// lists IPv6 then IPv4 with a jump commit that deletes the one copy it assumes, and
// carries no live-state fields (it read no guest).
func TestEgressPlanOfflineJSON(t *testing.T) {
	cfg := egressConfig(t, "closed")
	var out, errb bytes.Buffer
	if code := Main([]string{"egress", "plan", "-c", cfg, "--alias-v4", "10.1.2.3", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var got struct {
		Posture     string `json:"posture"`
		AliasV4     string `json:"alias_v4"`
		AliasSource string `json:"alias_source"`
		Families    []struct {
			Family        string `json:"family"`
			JumpRestore   string `json:"jump_restore"`
			CommitOrder   int    `json:"commit_order"`
			ChainExists   *bool  `json:"chain_exists"`
			JumpCopiesNow *int   `json:"jump_copies_now"`
		} `json:"families"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got.Posture != "closed" || got.AliasV4 != "10.1.2.3" || got.AliasSource != "flag" || len(got.Families) != 2 {
		t.Fatalf("plan %+v", got)
	}
	for i, f := range got.Families {
		want := []string{"IPv6", "IPv4"}[i]
		if f.Family != want || f.CommitOrder != i+1 || f.ChainExists != nil || f.JumpCopiesNow != nil {
			t.Errorf("family %d: %+v", i, f)
		}
		if f.JumpRestore != "*filter\n-D OUTPUT -j LEVER_EGRESS\n-I OUTPUT 1 -j LEVER_EGRESS\nCOMMIT\n" {
			t.Errorf("%s jump commit %q", f.Family, f.JumpRestore)
		}
	}
}
