package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

const workBlueprint = `
name = "worker"
version = "0.3.0"
system_prompt = "You are a careful worker."

[stages.work]
prompt = "Process notes.txt."
tools = ["read_file", "write_file", "shell", "submit_output"]

[stages.review]
prompt = "Review the upper-cased file."
tools = ["read_file", "submit_output"]
`

const token = "test-token-0123456789abcdef"

type env struct {
	home, levHome, wd, cfgFile string
	client                     *Client
	base                       string
	watcher                    *levconfig.Watcher
	cancel                     context.CancelFunc
	done                       chan error
}

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// start runs a real daemon on a loopback port with a scripted provider.
func start(t *testing.T, config string) *env {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	e := &env{home: filepath.Join(root, "home"), levHome: filepath.Join(root, "lev"), wd: filepath.Join(root, "home", "proj")}
	e.cfgFile = filepath.Join(e.levHome, "config.toml")
	write(t, e.cfgFile, config)
	os.MkdirAll(e.wd, 0o755)
	w, err := levconfig.NewWatcher(e.cfgFile, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	e.watcher = w
	eng := &runner.Engine{
		Store:     &runner.Store{Dir: filepath.Join(e.levHome, "runs")},
		AgentsDir: filepath.Join(e.levHome, "agents"),
		Config:    w.Current,
		Home:      e.home,
		Log:       t.Logf,
		// The real security steps, as lev serve wires them.
		NewGate:     taintgate.Factory,
		NewExecutor: sandboxexec.Factory,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &Server{Engine: eng, Watcher: w, Token: token, Log: t.Logf}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-e.done })
	e.base = "http://" + ln.Addr().String()
	e.client = &Client{Base: e.base, Token: token}
	return e
}

func scriptedConfig(script string) string {
	return "[provider]\nkind = \"scripted\"\nscript = " + quote(script) + "\n"
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestDaemonEndToEnd(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	script := filepath.Join(root, "script.toml")
	write(t, script, modelScript("work-script.toml"))
	e := start(t, scriptedConfig(script))
	write(t, filepath.Join(e.levHome, "agents", "worker.toml"), workBlueprint)
	write(t, filepath.Join(e.wd, "notes.txt"), "hello from notes")
	ctx := context.Background()

	rec, err := e.client.Spawn(ctx, runner.Spec{Agent: "worker", Workdir: e.wd, Allow: []string{"shell"}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err = e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != runner.StatusCompleted {
		t.Fatalf("status %s: %s", rec.Status, rec.Error)
	}

	// The result, read back over the HTTP API with the bearer token.
	req, _ := http.NewRequest("GET", e.base+"/api/agents/"+rec.ID+"/result", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var res Result
	if err := json.Unmarshal(body, &res); err != nil || resp.StatusCode != 200 {
		t.Fatalf("result: %d %s", resp.StatusCode, body)
	}
	var out string
	json.Unmarshal(res.Output, &out)
	if out != "reviewed: HELLO FROM NOTES PROCESSED" {
		t.Fatalf("output %q", out)
	}

	// The work happened in the workdir.
	if b, _ := os.ReadFile(filepath.Join(e.wd, "out", "out.txt")); string(b) != "hello from notes processed" {
		t.Fatalf("out.txt = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(e.wd, "upper.txt")); string(b) != "HELLO FROM NOTES PROCESSED" {
		t.Fatalf("upper.txt = %q", b)
	}

	// GET /api/agents/{id}: stages with their outputs.
	got, err := e.client.Get(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Stages) != 2 || got.Stages[0].Name != "work" || got.Stages[0].Status != "completed" || got.Stages[0].ToolCalls != 4 || got.Stages[1].ToolCalls != 2 {
		t.Fatalf("stages %+v", got.Stages)
	}
	if !strings.Contains(string(got.Stages[0].Output), "HELLO FROM NOTES PROCESSED") {
		t.Fatalf("stage 0 output %s", got.Stages[0].Output)
	}

	// The record on disk: runs/<id>/ with stages, tool calls and the result.
	runDir := filepath.Join(e.levHome, "runs", rec.ID)
	for _, f := range []string{"run.json", "result.json", "stages/0/stage.json", "stages/0/messages.json", "stages/0/tool_calls.jsonl", "stages/1/tool_calls.jsonl"} {
		if _, err := os.Stat(filepath.Join(runDir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	var tools []string
	f, _ := os.Open(filepath.Join(runDir, "stages/0/tool_calls.jsonl"))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var cr struct {
			Tool             string `json:"tool"`
			Permission       string `json:"permission"`
			PermissionSource string `json:"permission_source"`
			IsError          bool   `json:"is_error"`
		}
		json.Unmarshal(sc.Bytes(), &cr)
		if cr.IsError || cr.Permission != "allow" {
			t.Errorf("call %s: error=%v permission=%s", cr.Tool, cr.IsError, cr.Permission)
		}
		if cr.Tool == "shell" && !strings.Contains(cr.PermissionSource, "--allow shell") {
			t.Errorf("shell permission source %q", cr.PermissionSource)
		}
		tools = append(tools, cr.Tool)
	}
	f.Close()
	if strings.Join(tools, ",") != "read_file,write_file,shell,submit_output" {
		t.Fatalf("tool calls %v", tools)
	}

	// lev ps over the API.
	list, err := e.client.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != rec.ID {
		t.Fatalf("list %v %v", list, err)
	}
}

func TestDaemonAuth(t *testing.T) {
	e := start(t, "")
	cases := []struct {
		name, method, path, auth string
		want                     int
	}{
		{"health needs no token", "GET", "/api/health", "", 200},
		{"no token", "GET", "/api/agents", "", 401},
		{"wrong token", "GET", "/api/agents", "Bearer nope", 401},
		{"token without Bearer", "GET", "/api/agents", token, 401},
		{"token prefix", "GET", "/api/agents", "Bearer " + token[:10], 401},
		{"spawn without token", "POST", "/api/agents", "", 401},
		{"result without token", "GET", "/api/agents/r-20260101-000000-abcdef/result", "", 401},
		{"right token", "GET", "/api/agents", "Bearer " + token, 200},
		{"unknown run", "GET", "/api/agents/r-20260101-000000-abcdef", "Bearer " + token, 404},
		{"path traversal id", "GET", "/api/agents/..%2f..%2fetc", "Bearer " + token, 404},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, e.base+tc.path, strings.NewReader("{}"))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
			}
		})
	}
}

func TestCheckListen(t *testing.T) {
	cases := []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:7447", false, true},
		{"[::1]:7447", false, true},
		{"localhost:7447", false, true},
		{"0.0.0.0:7447", false, false},
		{"10.1.2.3:7447", false, false},
		{":7447", false, false},
		{"0.0.0.0:7447", true, true},
	}
	for _, tc := range cases {
		if err := CheckListen(tc.addr, tc.remote); (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, %v) = %v", tc.addr, tc.remote, err)
		}
	}
}

const readerBlueprint = `
name = "reader"
version = "1.0.0"
[read_paths]
allow = ["~/docs"]
[stages.s]
tools = ["read_file", "submit_output"]
`

// TestResumePicksUpGrant: a run refused for a missing grant stops with the config line to
// add; after the grant lands in config.toml (reloaded on change), lev resume re-runs the
// refused call and the run completes. A broken config edit in between is ignored, keeping
// the last good config.
func TestResumePicksUpGrant(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	script := filepath.Join(root, "script.toml")
	e := start(t, scriptedConfig(script))
	secret := filepath.Join(e.home, "docs", "plan.md")
	write(t, secret, "the plan")
	write(t, script, `
[[rule]]
turn = 1
[[rule.call]]
tool = "read_file"
args = '{"path": `+quote(secret)+`}'
[[rule]]
turn = 2
[[rule.call]]
tool = "submit_output"
args = '{"output": "read: {{last}}"}'
`)
	write(t, filepath.Join(e.levHome, "agents", "reader.toml"), readerBlueprint)
	ctx := context.Background()
	// --yolo: the real taint gate would otherwise block submitting the Private data with
	// nobody to ask; --yolo waives and audits that, and lifts no fence.
	rec, err := e.client.Spawn(ctx, runner.Spec{Agent: "reader", Workdir: e.wd, Yolo: true})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ = e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
	if rec.Status != runner.StatusRefused || rec.Refusal == nil || rec.Refusal.Code != "not-granted" {
		t.Fatalf("status %s refusal %+v: %s", rec.Status, rec.Refusal, rec.Error)
	}
	if len(rec.ReadPaths) != 1 || rec.ReadPaths[0].Entry != "~/docs" || rec.ReadPaths[0].Granted {
		t.Fatalf("read paths %+v", rec.ReadPaths)
	}
	if !strings.Contains(rec.Error, `add to your config.toml: [agent_read_paths.reader] allow = ["~/docs"]`) {
		t.Fatalf("refusal lacks the grant line: %s", rec.Error)
	}
	if _, err := e.client.Result(ctx, rec.ID); err == nil {
		t.Fatal("result of a refused run answered 200")
	} else if ae, ok := err.(*APIError); !ok || ae.Code != 409 {
		t.Fatalf("result of a refused run: %v", err)
	}

	// A broken edit: the reload fails and the last good config stays.
	write(t, e.cfgFile, scriptedConfig(script)+"[security]\nread_pathz = []\n")
	if e.watcher.Check() {
		t.Fatal("a broken config took effect")
	}
	if err := e.watcher.LastError(); err == nil || !strings.Contains(err.Error(), `config.toml:5: unknown key "security.read_pathz"`) {
		t.Fatalf("reload error %v", err)
	}
	if e.watcher.Current().Provider.Kind != "scripted" {
		t.Fatal("last good config lost")
	}
	// Still refused on resume: the broken file granted nothing.
	rec, err = e.client.Resume(ctx, rec.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ = e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
	if rec.Status != runner.StatusRefused {
		t.Fatalf("status after resume without grant: %s", rec.Status)
	}

	// The grant; resume reloads and the refused call runs first.
	write(t, e.cfgFile, scriptedConfig(script)+"[agent_read_paths.reader]\nallow = [\"~/docs\"]\n")
	rec, err = e.client.Resume(ctx, rec.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ = e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
	if rec.Status != runner.StatusCompleted {
		t.Fatalf("status after grant: %s %s", rec.Status, rec.Error)
	}
	res, err := e.client.Result(ctx, rec.ID)
	if err != nil || string(res.Output) != `"read: the plan"` {
		t.Fatalf("result %s %v", res.Output, err)
	}
	if len(rec.ReadPaths) != 1 || !rec.ReadPaths[0].Granted || rec.ReadPaths[0].By != "[agent_read_paths.reader]" {
		t.Fatalf("read paths after grant %+v", rec.ReadPaths)
	}
	if rec.Resumes != 2 || rec.Stages[0].ToolCalls != 4 {
		t.Fatalf("resumes %d, calls %d", rec.Resumes, rec.Stages[0].ToolCalls)
	}
	if _, err := e.client.Resume(ctx, rec.ID, false); err == nil {
		t.Fatal("resumed a completed run")
	}
}

// TestReloadOnChange: the watcher's poll picks up an edit without a resume.
func TestReloadOnChange(t *testing.T) {
	e := start(t, "[tool_permissions]\nshell = \"ask\"\n")
	write(t, e.cfgFile, "[tool_permissions]\nshell = \"deny\"\n")
	deadline := time.Now().Add(10 * time.Second)
	for e.watcher.Current().Perms["shell"] != "deny" {
		if time.Now().After(deadline) {
			t.Fatal("config not reloaded within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	write(t, e.cfgFile, "[tool_permissions]\nshell = \"sometimes\"\n")
	for e.watcher.LastError() == nil {
		if time.Now().After(deadline) {
			t.Fatal("bad config not noticed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if e.watcher.Current().Perms["shell"] != "deny" {
		t.Fatal("bad reload replaced the last good config")
	}
	if !strings.Contains(e.watcher.LastError().Error(), `config.toml:2: key "tool_permissions.shell": bad permission "sometimes"`) {
		t.Fatalf("error %v", e.watcher.LastError())
	}
}

// waitQuestion polls the run until its record holds a question (10 s at most).
func (e *env) waitQuestion(t *testing.T, rec *runner.Record) *runner.Record {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); rec.Question == nil; {
		if time.Now().After(deadline) {
			t.Fatal("no question within 10s")
		}
		time.Sleep(20 * time.Millisecond)
		rec, _ = e.client.Get(context.Background(), rec.ID)
	}
	return rec
}

// TestInteractiveAsk: an interactive run's ask waits in its record for an answer over the
// API; yes runs the tool, no refuses it; a wrong question id is rejected.
func TestInteractiveAsk(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	script := filepath.Join(root, "script.toml")
	write(t, script, modelScript("interactive-ask-script.toml"))
	e := start(t, scriptedConfig(script))
	write(t, filepath.Join(e.levHome, "agents", "asker.toml"), "name = \"asker\"\nversion = \"1\"\n[stages.s]\ntools = [\"shell\", \"submit_output\"]\n")
	ctx := context.Background()
	cases := []struct {
		answer, want string
	}{
		{"once", "asked-and-ran"},
		{"deny", `permission is \"ask\" and the answer was no`},
	}
	for _, tc := range cases {
		t.Run(tc.answer, func(t *testing.T) {
			rec, err := e.client.Spawn(ctx, runner.Spec{Agent: "asker", Workdir: e.wd, Interactive: true})
			if err != nil {
				t.Fatal(err)
			}
			rec = e.waitQuestion(t, rec)
			if rec.Question.Tool != "shell" || !strings.Contains(string(rec.Question.Args), "asked-and-ran") {
				t.Fatalf("question %+v", rec.Question)
			}
			if err := e.client.Answer(ctx, rec.ID, "q999", "once"); err == nil {
				t.Fatal("answer to a question not asked was accepted")
			}
			if err := e.client.Answer(ctx, rec.ID, rec.Question.ID, tc.answer); err != nil {
				t.Fatal(err)
			}
			rec, _ = e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
			if rec.Status != runner.StatusCompleted || !strings.Contains(string(rec.Result), tc.want) || rec.Question != nil {
				t.Fatalf("%s %s %+v", rec.Status, rec.Result, rec.Question)
			}
		})
	}
}

// TestAskShowsTheWholeCommand: the ask event a prompt is drawn from carries a long
// command whole. A command padded past the 1 KiB every other event keeps would otherwise
// show only its harmless head, and the person would approve a tail they never saw; the
// record's question (the control) always had it whole.
func TestAskShowsTheWholeCommand(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	script := filepath.Join(root, "script.toml")
	cmd := "echo " + strings.Repeat("harmless ", 500) + "; echo HIDDEN-TAIL"
	write(t, script, strings.Replace(modelScript("interactive-ask-script.toml"), "echo asked-and-ran", cmd, 1))
	e := start(t, scriptedConfig(script))
	write(t, filepath.Join(e.levHome, "agents", "asker.toml"), "name = \"asker\"\nversion = \"1\"\n[stages.s]\ntools = [\"shell\", \"submit_output\"]\n")
	ctx := context.Background()
	rec, err := e.client.Spawn(ctx, runner.Spec{Agent: "asker", Workdir: e.wd, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	rec = e.waitQuestion(t, rec)
	if !strings.Contains(string(rec.Question.Args), "HIDDEN-TAIL") {
		t.Fatalf("control: the record's question lacks the tail: %.200s", rec.Question.Args)
	}
	var ask *events.Event
	for _, ev := range readFileEvents(t, filepath.Join(e.levHome, "runs", rec.ID, events.FileName)) {
		if ev.Type == events.Ask {
			ev := ev
			ask = &ev
		}
	}
	if ask == nil || len(cmd) <= events.MaxArgs {
		t.Fatalf("no ask event (or the command is not past the cap: %d bytes)", len(cmd))
	}
	var args struct{ Command string }
	if err := json.Unmarshal(ask.Args, &args); err != nil || args.Command != cmd {
		t.Errorf("the ask event's command is not the whole command (err %v): %d bytes, ends %q", err, len(args.Command), args.Command[max(0, len(args.Command)-40):])
	}
	if err := e.client.Answer(ctx, rec.ID, rec.Question.ID, "deny"); err != nil {
		t.Fatal(err)
	}
	e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
}
