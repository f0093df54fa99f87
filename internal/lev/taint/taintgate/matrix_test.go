package taintgate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// TestExfiltrationMatrix: for each outbound built-in, after a Private read through a
// grant, in each way the gate can answer: did the audit say so, and did the tool fire?
func TestExfiltrationMatrix(t *testing.T) {
	type tool struct {
		name, args, allowTarget string
		fired                   func(w *world, o outcome) bool
	}
	tools := []tool{
		{"shell", `{"command": "echo {{last}} > fired.txt"}`, "echo *",
			func(w *world, o outcome) bool { _, err := os.Stat(filepath.Join(w.wd, "fired.txt")); return err == nil }},
		{"web_fetch", `{"url": "SRV/page"}`, "127.0.0.*",
			func(w *world, o outcome) bool { n, _ := w.received(); return n > 0 }},
		{"http_post", `{"url": "SRV/collect", "body": "{{last}}"}`, "127.0.0.1",
			func(w *world, o outcome) bool { n, _ := w.received(); return n > 0 }},
		{"submit_output", `{"output": "{{last}}"}`, "result",
			func(w *world, o outcome) bool { return strings.Contains(string(o.rec.Result), secret) }},
	}
	yes := askFunc(func(context.Context, pipeline.Question) (bool, error) { return true, nil })
	no := askFunc(func(context.Context, pipeline.Question) (bool, error) { return false, nil })
	type mode struct {
		name    string
		mk      func(tl tool) runCase
		sources []taint.Source
		fires   bool
	}
	modes := []mode{
		{"blocked headless", func(tl tool) runCase { return runCase{} }, []taint.Source{taint.SourceAutoBlock}, false},
		{"asked, allowed once", func(tl tool) runCase { return runCase{asker: yes} }, []taint.Source{taint.SourceUserOnce}, true},
		{"asked, denied", func(tl tool) runCase { return runCase{asker: no} }, []taint.Source{taint.SourceUserDeny}, false},
		{"waived under --yolo", func(tl tool) runCase { return runCase{yolo: true} }, []taint.Source{taint.SourceAutoBlock, taint.SourceYoloAutoApprove}, true},
		{"allowed by an allowlist rule", func(tl tool) runCase {
			return runCase{policy: "[[allow]]\ntool = \"" + tl.name + "\"\ntarget = \"" + tl.allowTarget + "\"\nmax_sensitivity = \"private\"\n"}
		}, []taint.Source{taint.SourcePolicyAllow}, true},
	}
	for _, tl := range tools {
		for _, m := range modes {
			t.Run(tl.name+"/"+m.name, func(t *testing.T) {
				w := newWorld(t)
				c := m.mk(tl)
				c.tools = []string{"read_file", tl.name}
				c.script = strings.ReplaceAll(script("one", tl.name, tl.args), "HOME", w.home)
				o := w.run(t, c)
				checkAudit(t, o.audit, want{tool: tl.name, sources: m.sources, taint: taint.Private})
				if got := tl.fired(w, o); got != m.fires {
					t.Errorf("tool fired = %v, want %v (run %s: %s)", got, m.fires, o.rec.Status, o.rec.Error)
				}
			})
		}
	}
}

// TestMCPToolMatrix: the same answers for an unclassified MCP-style tool, through the
// registered gate (the pipeline cannot offer such a tool yet).
func TestMCPToolMatrix(t *testing.T) {
	const tool = "mcp__webhook__send"
	args := `{"url": "https://hooks.example.test/x", "text": "k"}`
	for _, tc := range []struct {
		name    string
		policy  string
		yolo    bool
		asker   pipeline.Asker
		allowed bool
		sources []taint.Source
	}{
		{"blocked headless", "", false, nil, false, []taint.Source{taint.SourceAutoBlock}},
		{"asked, allowed once", "", false, askFunc(func(context.Context, pipeline.Question) (bool, error) { return true, nil }), true, []taint.Source{taint.SourceUserOnce}},
		{"asked, denied", "", false, askFunc(func(context.Context, pipeline.Question) (bool, error) { return false, nil }), false, []taint.Source{taint.SourceUserDeny}},
		{"waived under --yolo", "", true, nil, true, []taint.Source{taint.SourceAutoBlock, taint.SourceYoloAutoApprove}},
		{"allowed by an allowlist rule", "[[allow]]\ntool = \"mcp__webhook__*\"\ntarget = \"hooks.example.test\"\nmax_sensitivity = \"private\"\n", false, nil, true, []taint.Source{taint.SourcePolicyAllow}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "", "", tc.policy, tc.yolo)
			if tc.asker != nil {
				h.g.gate.Mode = taint.Interactive
				h.g.gate.Asker = asker{tc.asker}
			}
			h.readPrivate()
			if d := h.call(tool, args); d.Allow != tc.allowed {
				t.Fatalf("decision %+v", d)
			}
			recs := h.audit()
			if len(recs) != len(tc.sources) {
				t.Fatalf("audit %+v", recs)
			}
			for i, r := range recs {
				if r.DecisionSource != tc.sources[i] || r.Tool != tool || r.Classified || r.Taint != taint.Private || r.Target != "hooks.example.test" {
					t.Errorf("record %d: %+v", i, r)
				}
			}
		})
	}
}
