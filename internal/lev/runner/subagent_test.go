package runner

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

func boolp(b bool) *bool { return &b }

// TestPlanChildNarrowsOnly: the pure decision. Every way a request can be wider than the
// calling stage (a tool it lacks, an MCP tool, a read path it holds no grant for, network
// its sandbox cuts, network = false with nothing to enforce it, a depth past 2, spawn_agent
// at the last depth, a lower starting taint) is refused naming what; the narrower requests
// are planned as asked (the positive controls).
func TestPlanChildNarrowsOnly(t *testing.T) {
	ns := &sandbox.Config{Kind: sandbox.KindNamespace}
	nsOff := &sandbox.Config{Kind: sandbox.KindNamespace, Network: boolp(false)}
	base := parentView{Depth: 0, Tools: []string{"read_file", "list_dir", "spawn_agent", "submit_output"}, Granted: []string{"~/docs"},
		Sandbox: ns, Effective: sandbox.Config{Kind: sandbox.KindNamespace}, Level: taint.Internal}
	with := func(f func(*parentView)) parentView { v := base; f(&v); return v }
	cases := []struct {
		name   string
		parent parentView
		req    pipeline.SubAgentRequest
		code   string // "": planned
		msg    string
		check  func(*childPlan) bool
	}{
		{"narrower: a subset of tools", base, pipeline.SubAgentRequest{Tools: []string{"read_file"}}, "", "",
			func(p *childPlan) bool {
				return p.Depth == 1 && len(p.Tools) == 1 && p.Level == taint.Internal && p.Sandbox.Kind == sandbox.KindNamespace && p.Sandbox.Network == nil
			}},
		{"narrower: a granted read path", base, pipeline.SubAgentRequest{Tools: []string{"read_file"}, ReadPaths: []string{"~/docs"}}, "", "",
			func(p *childPlan) bool { return len(p.ReadPaths) == 1 }},
		{"narrower: network off in a namespace", base, pipeline.SubAgentRequest{Tools: []string{"list_dir"}, Network: boolp(false)}, "", "",
			func(p *childPlan) bool { return p.Sandbox.Network != nil && !*p.Sandbox.Network }},
		{"narrower: a higher starting taint", base, pipeline.SubAgentRequest{Tools: []string{"list_dir"}, Label: "private"}, "", "",
			func(p *childPlan) bool { return p.Level == taint.Private }},
		{"narrower: spawn_agent at depth 1", base, pipeline.SubAgentRequest{Tools: []string{"spawn_agent"}}, "", "",
			func(p *childPlan) bool { return p.Depth == 1 }},
		{"more tools", base, pipeline.SubAgentRequest{Tools: []string{"read_file", "shell"}}, CodeSubAgentWider,
			`tool "shell" is not offered to this stage (it has read_file, list_dir, spawn_agent, submit_output)`, nil},
		{"an MCP tool", with(func(v *parentView) { v.Tools = append(v.Tools, "mcp__fs__read") }), pipeline.SubAgentRequest{Tools: []string{"mcp__fs__read"}}, CodeSubAgentWider,
			`tool "mcp__fs__read" is an MCP tool`, nil},
		{"a wider read path", base, pipeline.SubAgentRequest{Tools: []string{"read_file"}, ReadPaths: []string{"~/.ssh"}}, CodeSubAgentWider,
			`read path "~/.ssh" is not one this run holds a grant for (it holds: ~/docs)`, nil},
		{"a read path the parent declares but is not granted", with(func(v *parentView) { v.Granted = nil }), pipeline.SubAgentRequest{Tools: []string{"read_file"}, ReadPaths: []string{"~/docs"}}, CodeSubAgentWider,
			`(it holds: none)`, nil},
		{"network the parent's sandbox cuts", with(func(v *parentView) { v.Sandbox, v.Effective = nsOff, *nsOff }), pipeline.SubAgentRequest{Tools: []string{"list_dir"}, Network: boolp(true)}, CodeSubAgentWider,
			"network = true, but this stage's sandbox (namespace) has network = false", nil},
		{"network off with no sandbox to cut it", with(func(v *parentView) { v.Sandbox, v.Effective = nil, sandbox.Config{Kind: sandbox.KindNone} }), pipeline.SubAgentRequest{Tools: []string{"list_dir"}, Network: boolp(false)}, CodeSubAgentWider,
			"network = false needs a container or namespace sandbox", nil},
		{"a depth past 2", with(func(v *parentView) { v.Depth = 2 }), pipeline.SubAgentRequest{Tools: []string{"list_dir"}}, CodeSubAgentDepth,
			"this run is a sub-agent at depth 2; sub-agents go at most 2 deep", nil},
		{"spawn_agent at the last depth", with(func(v *parentView) { v.Depth = 1 }), pipeline.SubAgentRequest{Tools: []string{"spawn_agent"}}, CodeSubAgentDepth,
			"the child would run at depth 2, the deepest a sub-agent goes (2), so it cannot be offered spawn_agent", nil},
		{"less taint than the parent", with(func(v *parentView) { v.Level = taint.Private }), pipeline.SubAgentRequest{Tools: []string{"list_dir"}, Label: "internal"}, CodeSubAgentWider,
			"label internal is below this run's taint (private)", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, ref := planChild(tc.parent, tc.req)
			if tc.code == "" {
				if ref != nil || !tc.check(plan) {
					t.Fatalf("plan %+v, refusal %v", plan, ref)
				}
				return
			}
			if ref == nil || ref.Code != tc.code || ref.Step != pipeline.StepExecute || !strings.Contains(ref.Msg, tc.msg) {
				t.Fatalf("refusal %+v, want %s: %s", ref, tc.code, tc.msg)
			}
		})
	}
}

// subEnv is an engine with the real taint gate, an agent "a" that declares and is
// granted one read path (PRIV, holding a secret), and the given rules.

func newSubEnv(t *testing.T, tools string, bpExtra string, rules []provider.Rule) (*Engine, string, string) {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	t.Setenv("LEV_HOME", filepath.Join(root, "levhome"))
	t.Setenv("LEV_POLICY", "")
	wd, priv := filepath.Join(root, "wd"), filepath.Join(root, "private")
	write(t, filepath.Join(priv, "secret.txt"), "SECRET-7f3a")
	write(t, filepath.Join(wd, "in.txt"), "workdir text")
	write(t, filepath.Join(root, "agents", "a.toml"), "name = \"a\"\nversion = \"1\"\n"+bpExtra+"\n[read_paths]\nallow = ["+strconv.Quote(priv)+"]\n[stages.s]\ntools = ["+tools+"]\nmax_turns = 4\n")
	cfg, err := levconfig.Parse("config.toml", []byte("[agent_read_paths.a]\nallow = ["+strconv.Quote(priv)+"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	prov := &provider.Scripted{Rules: rules}
	eng := &Engine{Store: &Store{Dir: filepath.Join(root, "levhome", "runs")}, AgentsDir: filepath.Join(root, "agents"), Home: root,
		Config:      func() *levconfig.Config { return cfg },
		NewProvider: func(levconfig.Provider) (provider.Provider, error) { return prov, nil },
		NewGate:     taintgate.Factory, NewExecutor: hostExec, Log: t.Logf}
	return eng, wd, priv
}

func call(tool, args string) []provider.ScriptCall {
	return []provider.ScriptCall{{Tool: tool, Args: args}}
}

// runAll starts agent a and returns every run record afterwards, the top-level one first.
func runAll(t *testing.T, eng *Engine, wd string, yolo bool) (*Record, map[string]*Record) {
	t.Helper()
	rec, err := eng.Start(context.Background(), Spec{Agent: "a", Workdir: wd, Yolo: yolo})
	if err != nil {
		t.Fatal(err)
	}
	eng.Wait()
	top, err := eng.Store.Load(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := eng.Store.List()
	all := map[string]*Record{}
	for _, r := range recs {
		all[r.ID] = r
	}
	return top, all
}

func childOf(all map[string]*Record, parent string) *Record {
	for _, r := range all {
		if r.Parent == parent {
			return r
		}
	}
	return nil
}

// TestSubAgentResultCarriesTheChildsLabel: a child that reads through the parent's grant
// comes back Private, and the parent's run takes that label from the spawn_agent result
// alone (it reads nothing itself). The control: the same child reading a workdir file
// comes back Internal, and so does the parent.
func TestSubAgentResultCarriesTheChildsLabel(t *testing.T) {
	for _, tc := range []struct {
		name, read, want string
		grant            bool
	}{
		{"child reads through the grant", "PRIV/secret.txt", "private", true},
		{"control: child reads the workdir", "in.txt", "internal", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rules []provider.Rule
			eng, wd, priv := newSubEnv(t, `"read_file", "spawn_agent", "submit_output"`, "", nil)
			rp := ""
			if tc.grant {
				rp = `, "read_paths": [` + strconv.Quote(priv) + `]`
			}
			rules = []provider.Rule{
				{Stage: "s", Turn: 1, Calls: call("spawn_agent", `{"task": "read it", "tools": ["read_file"]`+rp+`}`)},
				{Stage: "s", Turn: 2, Calls: call("submit_output", `{"output": "{{last}}"}`)},
				{Stage: "worker", Turn: 1, Calls: call("read_file", `{"path": `+strconv.Quote(strings.Replace(tc.read, "PRIV", priv, 1))+`}`)},
				{Stage: "worker", Turn: 2, Text: "child done"},
			}
			eng.NewProvider = func(levconfig.Provider) (provider.Provider, error) { return &provider.Scripted{Rules: rules}, nil }
			// --yolo: the child's Private answer leaves it (audited) rather than stopping it;
			// this case is about the label it carries back.
			top, all := runAll(t, eng, wd, true)
			child := childOf(all, top.ID)
			if top.Status != StatusCompleted || child == nil || child.Status != StatusCompleted || child.Depth != 1 {
				t.Fatalf("top %s %s %s; child %+v", top.Status, top.Error, top.Result, child)
			}
			if child.Label != tc.want || top.Label != tc.want {
				st, _ := os.ReadFile(filepath.Join(eng.Store.RunDir(child.ID), "taint_state.json"))
				t.Fatalf("labels: child %s, parent %s; want %s\n%s", child.Label, top.Label, tc.want, st)
			}
			if !strings.Contains(string(top.Result), "sub-agent run "+child.ID+" completed (label "+tc.want+")") || !strings.Contains(string(top.Result), "child done") {
				t.Fatalf("result %s", top.Result)
			}
		})
	}
}

// TestSubAgentInheritsTheParentsTaint: a parent that read Private data cannot launder it
// through a child: the child starts Private, so its answer is blocked by its own gate on
// a headless run and nothing of it comes back. The control: the same parent reading a
// workdir file gets the child's answer back.
func TestSubAgentInheritsTheParentsTaint(t *testing.T) {
	for _, tc := range []struct {
		name  string
		read  bool
		leaks bool
	}{
		{"parent read Private data", true, false},
		// A read tool of an agent holding a grant is Private whatever it reads, so the
		// control reads nothing before it spawns.
		{"control: parent read nothing", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng, wd, priv := newSubEnv(t, `"read_file", "list_dir", "spawn_agent", "submit_output"`, "", nil)
			spawn := provider.Rule{Stage: "s", Turn: 1, Calls: call("spawn_agent", `{"task": "say it", "tools": ["list_dir"]}`)}
			var rules []provider.Rule
			if tc.read {
				rules = append(rules, provider.Rule{Stage: "s", Turn: 1, Calls: call("read_file", `{"path": `+strconv.Quote(filepath.Join(priv, "secret.txt"))+`}`)})
				spawn.Turn = 2
			}
			rules = append(rules, spawn,
				provider.Rule{Stage: "s", Calls: call("submit_output", `{"output": "{{last}}"}`)},
				provider.Rule{Stage: "worker", Text: "LAUNDERED-ANSWER"})
			eng.NewProvider = func(levconfig.Provider) (provider.Provider, error) { return &provider.Scripted{Rules: rules}, nil }
			top, all := runAll(t, eng, wd, false)
			child := childOf(all, top.ID)
			if child == nil {
				t.Fatalf("no child run: %+v", top)
			}
			if tc.leaks {
				if child.Status != StatusCompleted || child.Label != "internal" || !strings.Contains(string(top.Result), "LAUNDERED-ANSWER") {
					t.Fatalf("control: child %s %s %s; top %s %s", child.Status, child.Label, child.Error, top.Status, top.Result)
				}
				return
			}
			if child.Label != "private" || child.Status == StatusCompleted {
				t.Fatalf("child %s, label %s: %s", child.Status, child.Label, child.Error)
			}
			b, _ := os.ReadFile(filepath.Join(eng.Store.RunDir(child.ID), "stages", "0", "taint_audit.json"))
			if !strings.Contains(string(b), "AutoBlock") {
				t.Fatalf("the child's gate did not block its answer: %s", b)
			}
			msgs, _ := os.ReadFile(filepath.Join(eng.Store.StageDir(top.ID, 0), "messages.json"))
			if strings.Contains(string(msgs), "LAUNDERED-ANSWER") || strings.Contains(string(top.Result), "LAUNDERED-ANSWER") {
				t.Fatalf("the child's answer reached the parent")
			}
		})
	}
}

// TestSubAgentWideningThroughARun: the refusals of TestPlanChildNarrowsOnly through a real
// run: the spawn_agent call is refused at execute with the code, no child run exists, and
// the run goes on (the positive control in each case is the same run's second call, a
// narrower request, which does start a child).
func TestSubAgentWideningThroughARun(t *testing.T) {
	for _, tc := range []struct {
		name, bp, args, msg string
	}{
		{"more tools", "", `{"task": "t", "tools": ["shell"]}`, `tool \"shell\" is not offered to this stage`},
		{"a wider read path", "", `{"task": "t", "tools": ["read_file"], "read_paths": ["/etc"]}`, `read path \"/etc\" is not one this run holds a grant for`},
		{"network the sandbox cuts", "[sandbox]\nkind = \"namespace\"\nnetwork = false\n", `{"task": "t", "tools": ["list_dir"], "network": true}`, "has network = false"},
		{"less taint", "", `{"task": "t", "tools": ["list_dir"], "label": "public"}`, "label public is below this run's taint (internal)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng, wd, _ := newSubEnv(t, `"read_file", "list_dir", "spawn_agent", "submit_output"`, tc.bp, nil)
			rules := []provider.Rule{
				{Stage: "s", Turn: 1, Calls: call("spawn_agent", tc.args)},
				{Stage: "s", Turn: 2, Calls: call("spawn_agent", `{"task": "t", "tools": ["list_dir"]}`)},
				{Stage: "s", Turn: 3, Calls: call("submit_output", `{"output": "{{last}}"}`)},
				{Stage: "worker", Text: "narrow child done"},
			}
			eng.NewProvider = func(levconfig.Provider) (provider.Provider, error) { return &provider.Scripted{Rules: rules}, nil }
			top, all := runAll(t, eng, wd, false)
			calls, _ := os.ReadFile(filepath.Join(eng.Store.StageDir(top.ID, 0), "tool_calls.jsonl"))
			first, _, _ := strings.Cut(string(calls), "\n")
			if !strings.Contains(first, `"code":"subagent-wider"`) || !strings.Contains(first, tc.msg) {
				t.Fatalf("first call's record:\n%s", first)
			}
			if len(all) != 2 || top.Status != StatusCompleted || !strings.Contains(string(top.Result), "narrow child done") {
				t.Fatalf("%d runs; top %s %s %s", len(all), top.Status, top.Error, top.Result)
			}
		})
	}
}

// TestSubAgentDepth: a child (depth 1) asking for a grandchild that could spawn again is
// refused; a grandchild with a narrower set runs at depth 2 (the control), and a
// grandchild cannot take a tool its own parent lacks even though the top run has it.
func TestSubAgentDepth(t *testing.T) {
	eng, wd, _ := newSubEnv(t, `"read_file", "list_dir", "spawn_agent", "submit_output"`, "", nil)
	rules := []provider.Rule{
		{Stage: "s", Turn: 1, Calls: call("spawn_agent", `{"task": "TASK-A", "tools": ["spawn_agent", "list_dir"]}`)},
		{Stage: "s", Turn: 2, Calls: call("submit_output", `{"output": "{{last}}"}`)},
		{Stage: "worker", LastContains: "TASK-B", Text: "grandchild done"},
		{Stage: "worker", Turn: 1, LastContains: "TASK-A", Calls: call("spawn_agent", `{"task": "TASK-B", "tools": ["spawn_agent"]}`)},
		{Stage: "worker", Turn: 2, LastContains: "cannot be offered spawn_agent", Calls: call("spawn_agent", `{"task": "TASK-B", "tools": ["read_file"]}`)},
		{Stage: "worker", Turn: 3, LastContains: "is not offered to this stage", Calls: call("spawn_agent", `{"task": "TASK-B", "tools": ["list_dir"]}`)},
		{Stage: "worker", Turn: 4, Text: "child done: {{last}}"},
	}
	eng.NewProvider = func(levconfig.Provider) (provider.Provider, error) { return &provider.Scripted{Rules: rules}, nil }
	top, all := runAll(t, eng, wd, false)
	child := childOf(all, top.ID)
	if child == nil {
		t.Fatalf("no child: %s %s", top.Status, top.Error)
	}
	grand := childOf(all, child.ID)
	if top.Status != StatusCompleted || len(all) != 3 || grand == nil || grand.Depth != 2 || child.Depth != 1 || grand.Status != StatusCompleted {
		t.Fatalf("top %s %s; %d runs; child %+v; grandchild %+v", top.Status, top.Error, len(all), child, grand)
	}
	calls, _ := os.ReadFile(filepath.Join(eng.Store.StageDir(child.ID, 0), "tool_calls.jsonl"))
	lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"code":"subagent-depth"`) || !strings.Contains(lines[1], `"code":"subagent-wider"`) || strings.Contains(lines[2], `"refusal"`) {
		t.Fatalf("child's calls:\n%s", calls)
	}
	// A sub-agent is not resumed on its own: it would take today's config, not its parent's.
	if _, err := eng.Resume(context.Background(), child.ID, false); err == nil || !strings.Contains(err.Error(), "is a sub-agent of run "+top.ID) {
		t.Fatalf("resume of a sub-agent: %v", err)
	}
}
