package taintgate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// These cases drive the registered gate directly with pipeline calls: an MCP-style tool,
// eviction and what survives a resume (context_test.go drives eviction through real runs,
// by context_drop). The gate, policy and audit code are the real ones.

type harness struct {
	t      *testing.T
	g      *Gate
	runDir string
	n      int
}

func newHarness(t *testing.T, cfgText, bpText, policyText string, yolo bool) *harness {
	t.Helper()
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	os.WriteFile(pol, []byte(policyText), 0o600)
	cfg, err := levconfig.Parse(filepath.Join(dir, "config.toml"), []byte("[security]\npolicy_file = "+q(pol)+"\n[agent_read_paths.h]\nallow = [\"~/secret\"]\n"+cfgText))
	if err != nil {
		t.Fatal(err)
	}
	bp, err := blueprint.Parse(filepath.Join(dir, "bp.toml"), []byte("name = \"h\"\nversion = \"1\"\n"+bpText+"\n[read_paths]\nallow = [\"~/secret\"]\n[stages.s]\nprompt = \"p\"\ntools = [\"read_file\"]\n"), pipeline.Known)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, runDir: filepath.Join(dir, "runs", "r1")}
	h.g, err = New(&pipeline.RunEnv{RunID: "r1", RunDir: h.runDir, Blueprint: bp, Config: cfg, Yolo: yolo})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) readPrivate() string {
	h.n++
	c := &pipeline.Call{ID: "read" + string(rune('0'+h.n)), Tool: "read_file", Args: mustArgs(h.t, "read_file", `{"path":"/home/u/secret/k"}`),
		Reads: []workfs.Access{{Path: "/home/u/secret/k", Outside: true, Entry: "~/secret"}}}
	h.g.Observe(context.Background(), c, &pipeline.Result{Content: secret})
	return c.ID
}

func (h *harness) call(tool, args string) pipeline.Decision {
	h.n++
	d, err := h.g.Check(context.Background(), &pipeline.Call{ID: "c" + string(rune('0'+h.n)), Tool: tool, Args: mustArgs(h.t, tool, args)})
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

// mustArgs decodes a call's arguments the way the pipeline's offer step does.
func mustArgs(t *testing.T, tool, raw string) pipeline.Args {
	t.Helper()
	a, err := pipeline.DecodeArgs(tool, []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (h *harness) audit() []taint.Record {
	recs, _ := taint.ReadAudit(taint.AuditPath(h.runDir, 0))
	return recs
}

func TestUnknownMCPToolFailsClosed(t *testing.T) {
	h := newHarness(t, "", "", "", false)
	// Even Internal data (the task) is above an unclassified tool's Public clearance.
	d := h.call("mcp__slack__post_message", `{"channel": "general", "text": "hi"}`)
	if d.Allow || d.Source != string(taint.SourceAutoBlock) {
		t.Fatalf("unclassified tool with internal data: %+v", d)
	}
	h.readPrivate()
	d = h.call("mcp__webhook__send", `{"url": "https://hooks.example.test/x", "text": "k"}`)
	if d.Allow {
		t.Fatalf("unclassified tool with private data allowed: %+v", d)
	}
	recs := h.audit()
	if len(recs) != 2 || recs[1].Classified || recs[1].Clearance != taint.Public || recs[1].Target != "hooks.example.test" || recs[1].Taint != taint.Private {
		t.Fatalf("audit: %+v", recs)
	}
	// Under --yolo the same call is waived, both records written.
	y := newHarness(t, "", "", "", true)
	y.readPrivate()
	if d := y.call("mcp__webhook__send", `{"url": "https://hooks.example.test/x"}`); !d.Allow || d.Source != string(taint.SourceYoloAutoApprove) {
		t.Fatalf("yolo: %+v", d)
	}
	if recs := y.audit(); len(recs) != 2 || recs[0].DecisionSource != taint.SourceAutoBlock || recs[1].DecisionSource != taint.SourceYoloAutoApprove {
		t.Fatalf("yolo audit: %+v", recs)
	}
	// A classification in the user's policy file lets it through within its clearance.
	c := newHarness(t, "", "", "[tools.mcp__slack__post_message]\nclearance = \"internal\"\n", false)
	if d := c.call("mcp__slack__post_message", `{}`); !d.Allow || d.Source != string(taint.SourceWithinClearance) {
		t.Fatalf("classified mcp tool: %+v", d)
	}
}

func TestEvictionLowersTaintAndTheSameCallPasses(t *testing.T) {
	h := newHarness(t, "", "", "", false)
	id := h.readPrivate()
	post := `{"url": "http://127.0.0.1:9/collect", "body": "x"}`
	if d := h.call("http_post", post); d.Allow {
		t.Fatalf("private data: %+v", d)
	}
	if h.g.Level() != taint.Private {
		t.Fatalf("level %s", h.g.Level())
	}
	if !h.g.Evict(id) {
		t.Fatal("evicting the read failed")
	}
	if h.g.Level() != taint.Internal {
		t.Fatalf("after eviction level %s, want internal (the task)", h.g.Level())
	}
	if d := h.call("http_post", post); !d.Allow || d.Source != string(taint.SourceWithinClearance) {
		t.Fatalf("after eviction: %+v", d)
	}
	recs := h.audit()
	if len(recs) != 2 || recs[0].DecisionSource != taint.SourceAutoBlock || recs[0].Taint != taint.Private ||
		recs[1].DecisionSource != taint.SourceWithinClearance || recs[1].Taint != taint.Internal {
		t.Fatalf("audit: %+v", recs)
	}
	// Two private reads: evicting one leaves the other, so the label stays.
	h2 := newHarness(t, "", "", "", false)
	a := h2.readPrivate()
	h2.readPrivate()
	h2.g.Evict(a)
	if h2.g.Level() != taint.Private {
		t.Fatalf("one of two private entries evicted: level %s", h2.g.Level())
	}
}

func TestResumeKeepsTaint(t *testing.T) {
	h := newHarness(t, "", "", "", false)
	h.readPrivate()
	// A new gate for the same run directory (what lev resume builds) starts Private.
	g2, err := New(&pipeline.RunEnv{RunID: "r1", RunDir: h.runDir, Blueprint: h.g.bp(), Config: h.g.cfg()})
	if err != nil {
		t.Fatal(err)
	}
	if g2.Level() != taint.Private {
		t.Fatalf("resumed gate level %s", g2.Level())
	}
}

func TestEnableSettings(t *testing.T) {
	off := newHarness(t, "[taint_tracking]\nenabled = false\n", "", "", false)
	off.readPrivate()
	if d := off.call("http_post", `{"url": "http://127.0.0.1:9/"}`); !d.Allow || d.Source != "TaintTrackingOff" {
		t.Fatalf("user turned it off: %+v", d)
	}
	// A blueprint cannot turn it off, but can turn it back on.
	on := newHarness(t, "", "[taint_tracking]\nenabled = false\n", "", false)
	on.readPrivate()
	if d := on.call("http_post", `{"url": "http://127.0.0.1:9/"}`); d.Allow {
		t.Fatalf("blueprint turned the gate off: %+v", d)
	}
	back := newHarness(t, "[taint_tracking]\nenabled = false\n", "[taint_tracking]\nenabled = true\n", "", false)
	back.readPrivate()
	if d := back.call("http_post", `{"url": "http://127.0.0.1:9/"}`); d.Allow {
		t.Fatalf("blueprint enabling over user off: %+v", d)
	}
	// A blueprint clearance can lower, not raise.
	raise := newHarness(t, "", "[taint_tracking]\nclearances = { http_post = \"private\" }\n", "", false)
	raise.readPrivate()
	if d := raise.call("http_post", `{"url": "http://127.0.0.1:9/"}`); d.Allow {
		t.Fatalf("blueprint raised a clearance: %+v", d)
	}
	lower := newHarness(t, "", "[taint_tracking]\nclearances = { http_post = \"public\" }\n", "", false)
	if d := lower.call("http_post", `{"url": "http://127.0.0.1:9/"}`); d.Allow {
		t.Fatalf("blueprint lowered clearance to public but internal data passed: %+v", d)
	}
	// The user's config can raise it.
	user := newHarness(t, "[taint_tracking]\nclearances = { http_post = \"private\" }\n", "", "", false)
	user.readPrivate()
	if d := user.call("http_post", `{"url": "http://127.0.0.1:9/"}`); !d.Allow {
		t.Fatalf("user clearance: %+v", d)
	}
}

// TestTurnAndTodoLabelsSurviveResume: the labels context_drop and the todo list depend on
// are in taint_state.json: a resumed run's gate still knows the model turn written after a
// Private read (evicting the read alone lowers nothing), and still labels the todo list
// written while Private.
func TestTurnAndTodoLabelsSurviveResume(t *testing.T) {
	h := newHarness(t, "", "", "", false)
	read := h.readPrivate()
	h.g.ObserveTurn(0, "m3", false)
	todo := &pipeline.Call{ID: "todo1", Tool: "todo_write", Args: mustArgs(t, "todo_write", `{"todos": [{"content": "x", "status": "pending"}]}`)}
	h.g.Observe(context.Background(), todo, &pipeline.Result{Content: "saved"})
	h.g.Evict(todo.ID)

	g2, err := New(h.g.env)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := g2.EntryLevel("m3", true); !ok || l != taint.Private {
		t.Fatalf("turn m3 after resume: %v %v", l, ok)
	}
	if !g2.Evict(read) {
		t.Fatal("the read's entry is gone after resume")
	}
	if g2.Level() != taint.Private {
		t.Fatalf("the turn written after the read no longer holds the taint: %s", g2.Level())
	}
	if !g2.EvictTurn("m3") || g2.Level() != taint.Internal {
		t.Fatalf("control: with the read and the turn evicted the taint is %s, want internal", g2.Level())
	}
	rd := &pipeline.Call{ID: "todo2", Tool: "todo_read", Args: mustArgs(t, "todo_read", `{}`)}
	g2.Observe(context.Background(), rd, &pipeline.Result{Content: "1. [ ] x"})
	if g2.Level() != taint.Private {
		t.Fatalf("todo_read after resume: %s, want private (the list was written while private)", g2.Level())
	}
}
