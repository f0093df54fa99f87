package mcprun_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

// The tests here drive whole runs through a real lev daemon on loopback (the HTTP API, the
// engine, the taint gate and the sandbox executor lev serve wires), with the model
// scripted by the scripted provider, against MCP servers that are real processes: the npm
// reference servers, and hostile ones written here (node scripts over stdio, Go HTTP
// handlers). Without node (or the npm install) they skip, under CI=true they fail.

const levToken = "lvtsbx-mcp-token-0123456789abcdef"

type world struct {
	t       *testing.T
	root    string
	home    string
	levHome string
	wd      string
	client  *daemon.Client
	eng     *runner.Engine
	cfgFile string
}

func need(t *testing.T, format string, a ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, a...)
	}
	t.Skipf(format, a...)
}

func nodePath(t *testing.T) string {
	node, err := exec.LookPath("node")
	if err != nil {
		need(t, "node is not installed (apt-get install nodejs npm)")
	}
	r, _ := filepath.EvalSymlinks(node)
	return r
}

// npmDir is where `make mcp-servers` installed the reference servers.
func npmDir(t *testing.T) string {
	dir := os.Getenv("LEV_MCP_SERVERS")
	if dir == "" {
		dir, _ = filepath.Abs("../../../../.cache/mcp")
	}
	for _, p := range []string{"server-everything", "server-filesystem"} {
		if _, err := os.Stat(npmScript(dir, p)); err != nil {
			need(t, "MCP servers not installed in %s (run `make mcp-servers`): %v", dir, err)
		}
	}
	return dir
}

func npmScript(dir, pkg string) string {
	return filepath.Join(dir, "node_modules/@modelcontextprotocol", pkg, "dist/index.js")
}

// newWorld makes a home with a secret, lev's home (its token file holding levToken), a
// workdir, and the daemon's environment as lev serve has it: LEV_TOKEN and a provider key
// in its environment, which no server may see.
func newWorld(t *testing.T) *world {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	w := &world{t: t, root: root, home: filepath.Join(root, "home"), levHome: filepath.Join(root, "lev"), wd: filepath.Join(root, "home", "proj")}
	for _, d := range []string{w.wd, filepath.Join(w.home, "secret"), filepath.Join(w.levHome, "agents")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(w.home, "secret", "key.txt"), []byte("SECRET-KEY-42"), 0o644)
	os.WriteFile(filepath.Join(w.home, "public.txt"), []byte("PUBLIC-NOTE"), 0o644)
	os.WriteFile(filepath.Join(w.wd, "readme.txt"), []byte("project readme"), 0o644)
	os.WriteFile(filepath.Join(w.levHome, "token"), []byte(levToken), 0o644)
	t.Setenv("LEV_HOME", w.levHome)
	t.Setenv("LEV_USER_HOME", w.home)
	t.Setenv("LEV_TOKEN", levToken)
	t.Setenv("OPENAI_API_KEY", "sk-provider-secret")
	t.Setenv("LEV_BENCH_SOCKET", "")
	return w
}

func q(s string) string { b, _ := json.Marshal(s); return string(b) }

// start writes config.toml (scripted provider, the given extra tables) and a policy file,
// and starts the daemon.
func (w *world) start(cfg, policy string, script string) {
	t := w.t
	t.Helper()
	scr := filepath.Join(w.root, "script.toml")
	os.WriteFile(scr, []byte(strings.ReplaceAll(script, "HOME", w.home)), 0o644)
	pol := filepath.Join(w.root, "policy.toml")
	os.WriteFile(pol, []byte(strings.ReplaceAll(policy, "HOME", w.home)), 0o644)
	w.cfgFile = filepath.Join(w.levHome, "config.toml")
	text := "[provider]\nkind = \"scripted\"\napi_key_env = \"OPENAI_API_KEY\"\nscript = " + q(scr) + "\n[security]\npolicy_file = " + q(pol) + "\n" + cfg
	if err := os.WriteFile(w.cfgFile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := levconfig.Load(w.cfgFile); err != nil {
		t.Fatalf("config: %v\n%s", err, text)
	}
	watcher, err := levconfig.NewWatcher(w.cfgFile, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	w.eng = &runner.Engine{Store: &runner.Store{Dir: filepath.Join(w.levHome, "runs")}, AgentsDir: filepath.Join(w.levHome, "agents"),
		Config: watcher.Current, Home: w.home, Log: t.Logf, Secrets: []string{levToken},
		NewGate: taintgate.Factory, NewExecutor: sandboxexec.Factory}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &daemon.Server{Engine: w.eng, Watcher: watcher, Token: levToken, Log: t.Logf}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	w.client = &daemon.Client{Base: "http://" + ln.Addr().String(), Token: levToken}
}

// agent installs a blueprint in the agents directory.
func (w *world) agent(name, text string) {
	os.WriteFile(filepath.Join(w.levHome, "agents", name+".toml"), []byte(text), 0o644)
}

// run spawns the agent and waits for its end.
func (w *world) run(agent string, yolo bool) *runner.Record {
	w.t.Helper()
	return w.runSpec(runner.Spec{Agent: agent, Workdir: w.wd, Yolo: yolo})
}

func (w *world) runSpec(spec runner.Spec) *runner.Record {
	t := w.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rec, err := w.client.Spawn(ctx, spec)
	if err != nil {
		t.Fatalf("spawn: %v", err)
	}
	rec, err = w.client.Wait(ctx, rec.ID, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// callLine is the part of a tool_calls.jsonl line the tests read.
type callLine struct {
	ID   string          `json:"id"`
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
	Gate *struct {
		Allow  bool
		Source string
	}
	Refusal *struct {
		Step, Code, Message string
	} `json:"refusal"`
	IsError bool   `json:"is_error"`
	Result  string `json:"result"`
}

func (w *world) calls(rec *runner.Record, stage int) []callLine {
	w.t.Helper()
	f, err := os.Open(filepath.Join(w.eng.Store.StageDir(rec.ID, stage), "tool_calls.jsonl"))
	if err != nil {
		w.t.Fatalf("run %s (%s: %s): %v", rec.ID, rec.Status, rec.Error, err)
	}
	defer f.Close()
	var out []callLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var c callLine
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			w.t.Fatalf("tool_calls.jsonl: %v", err)
		}
		out = append(out, c)
	}
	return out
}

// call finds the record of the call to tool (the first).
func (w *world) call(rec *runner.Record, tool string) callLine {
	w.t.Helper()
	for _, c := range w.calls(rec, 0) {
		if c.Tool == tool {
			return c
		}
	}
	w.t.Fatalf("run %s: no call to %s in the record (run %s: %s; mcp %+v)", rec.ID, tool, rec.Status, rec.Error, rec.MCP)
	return callLine{}
}

// toolMessage is the first tool message for tool in stage 0's messages.json: the result
// as the model was handed it (tool_calls.jsonl keeps only its first 4 KiB).
func (w *world) toolMessage(rec *runner.Record, tool string) provider.Message {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.eng.Store.StageDir(rec.ID, 0), "messages.json"))
	if err != nil {
		w.t.Fatal(err)
	}
	var msgs []provider.Message
	if err := json.Unmarshal(b, &msgs); err != nil {
		w.t.Fatalf("messages.json: %v", err)
	}
	for _, m := range msgs {
		if m.Role == "tool" && m.Name == tool {
			return m
		}
	}
	w.t.Fatalf("run %s: no tool message for %s in messages.json", rec.ID, tool)
	return provider.Message{}
}

func (w *world) audit(rec *runner.Record) []taint.Record {
	recs, _ := taint.ReadAudit(taint.AuditPath(w.eng.Store.RunDir(rec.ID), 0))
	return recs
}

// sources lists the audit's decision sources for tool, in order.
func sources(recs []taint.Record, tool string) []string {
	var s []string
	for _, r := range recs {
		if r.Tool == tool {
			s = append(s, string(r.DecisionSource))
		}
	}
	return s
}

// wholeRecord checks that the run's record files exist and parse: run.json (read back by
// the daemon), stage.json, messages.json, events.jsonl.
func (w *world) wholeRecord(rec *runner.Record) {
	w.t.Helper()
	dir := w.eng.Store.StageDir(rec.ID, 0)
	for _, f := range []string{filepath.Join(dir, "stage.json"), filepath.Join(dir, "messages.json")} {
		b, err := os.ReadFile(f)
		if err != nil || !json.Valid(b) {
			w.t.Errorf("run %s: %s: %v (valid JSON: %v)", rec.ID, f, err, json.Valid(b))
		}
	}
	if _, err := w.eng.Store.Load(rec.ID); err != nil {
		w.t.Errorf("run.json: %v", err)
	}
	if rec.Status == runner.StatusRunning {
		w.t.Errorf("run %s still running", rec.ID)
	}
}

// calls1 is a one-stage script: turn 1 makes the given calls, turn 2 answers "done".
func calls1(stage string, calls ...[2]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[[rule]]\nstage = %q\nturn = 1\n", stage)
	for _, c := range calls {
		fmt.Fprintf(&b, "[[rule.call]]\ntool = %q\nargs = '%s'\n", c[0], c[1])
	}
	fmt.Fprintf(&b, "\n[[rule]]\nstage = %q\nturn = 2\ntext = \"done\"\n", stage)
	return b.String()
}
