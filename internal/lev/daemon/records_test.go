package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

// Issue 10, lev item 11: a run whose model returns malformed output still leaves its whole
// record, and a record write that fails fails the run loudly, naming the file. A real
// daemon drives lev's OpenAI-compatible client against a loopback model server that
// answers each turn as the row says.

// logBuf collects the daemon's log lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) Printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// reply is one model turn: a raw body (status 200).
type reply func(runsDir string) string

func toolCall(name, args string) string {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"finish_reason": "tool_calls", "message": map[string]any{
		"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
			"function": map[string]any{"name": name, "arguments": args}}}}}}})
	return string(b)
}

func answer(text string) string {
	b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": text}}}})
	return string(b)
}

// stageDir is the only run's stage 0 directory under runsDir.
func stageDir(runsDir string) string {
	m, _ := filepath.Glob(filepath.Join(runsDir, "r-*", "stages", "0"))
	if len(m) != 1 {
		return filepath.Join(runsDir, "missing")
	}
	return m[0]
}

func TestRecordsSurviveMalformedOutputAndFailedWrites(t *testing.T) {
	readNotes := func(string) string { return toolCall("read_file", `{"path": "notes.txt"}`) }
	done := func(string) string { return answer("done") }
	huge := strings.Repeat("x", 3<<20)
	cases := []struct {
		name    string
		turns   []reply
		status  runner.Status
		errWant []string // in the run's error (and, for failed writes, the daemon log)
		logWant string   // in the daemon log
		// files the record must hold afterwards (relative to the run dir)
		files []string
		check func(t *testing.T, runDir string)
	}{
		{name: "invalid JSON tool arguments", turns: []reply{func(string) string { return toolCall("read_file", `{"path": "notes.txt"`) }, done},
			status: runner.StatusCompleted, files: []string{"run.json", "result.json", "stages/0/stage.json", "stages/0/messages.json", "stages/0/tool_calls.jsonl"},
			check: func(t *testing.T, runDir string) {
				var msgs []map[string]any
				b, _ := os.ReadFile(filepath.Join(runDir, "stages/0/messages.json"))
				if err := json.Unmarshal(b, &msgs); err != nil || len(msgs) != 4 || !strings.Contains(string(b), `{\"path\": \"notes.txt\"`) {
					t.Fatalf("messages.json does not hold the malformed call: %v %s", err, b)
				}
				calls := readCalls(t, runDir)
				if len(calls) != 1 || !strings.Contains(calls[0], "bad-arguments") {
					t.Fatalf("tool_calls.jsonl: %v", calls)
				}
			}},
		{name: "huge invalid arguments", turns: []reply{func(string) string { return toolCall("write_file", `{"path": "a.txt", "content": "`+huge) }, done},
			status: runner.StatusCompleted, files: []string{"stages/0/stage.json", "stages/0/messages.json", "stages/0/tool_calls.jsonl"}},
		{name: "huge answer", turns: []reply{readNotes, func(string) string { return answer(huge) }},
			status: runner.StatusCompleted, files: []string{"result.json", "stages/0/stage.json", "stages/0/messages.json", "stages/0/tool_calls.jsonl"},
			check: func(t *testing.T, runDir string) {
				if st, err := os.Stat(filepath.Join(runDir, "result.json")); err != nil || st.Size() < 3<<20 {
					t.Fatalf("result.json: %v %v", st, err)
				}
			}},
		{name: "non-JSON reply", turns: []reply{readNotes, func(string) string { return "<html>bad gateway</html>" }},
			status: runner.StatusFailed, errWant: []string{"stage work: model:"},
			files: []string{"stages/0/stage.json", "stages/0/messages.json", "stages/0/tool_calls.jsonl"}},
		{name: "empty reply", turns: []reply{func(string) string { return "" }},
			status: runner.StatusFailed, errWant: []string{"stage work: model:"}, files: []string{"stages/0/stage.json", "stages/0/messages.json"}},
		{name: "stage directory replaced by a file", turns: []reply{func(runs string) string {
			d := stageDir(runs)
			os.RemoveAll(d)
			os.WriteFile(d, []byte("not a directory"), 0o600)
			return readNotes(runs)
		}}, status: runner.StatusFailed, errWant: []string{"recording ", "stages/0/tool_calls.jsonl", "not a directory"},
			logWant: "tool_calls.jsonl", files: []string{"run.json"}},
		{name: "messages.json blocked by a directory", turns: []reply{func(runs string) string {
			os.MkdirAll(filepath.Join(stageDir(runs), "messages.json", "x"), 0o700)
			return readNotes(runs)
		}}, status: runner.StatusFailed, errWant: []string{"recording ", "stages/0/messages.json"},
			logWant: "messages.json", files: []string{"run.json", "stages/0/tool_calls.jsonl"}},
		{name: "result.json blocked by a directory", turns: []reply{func(runs string) string {
			os.MkdirAll(filepath.Join(filepath.Dir(filepath.Dir(stageDir(runs))), "result.json", "x"), 0o700)
			return readNotes(runs)
		}, done}, status: runner.StatusFailed, errWant: []string{"recording ", "result.json"},
			logWant: "result.json", files: []string{"run.json", "stages/0/stage.json", "stages/0/messages.json"}},
		{name: "control: the same run, writable", turns: []reply{readNotes, done},
			status: runner.StatusCompleted, files: []string{"run.json", "result.json", "stages/0/stage.json", "stages/0/messages.json", "stages/0/tool_calls.jsonl"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := filepath.EvalSymlinks(t.TempDir())
			levHome, wd := filepath.Join(root, "lev"), filepath.Join(root, "wd")
			runsDir := filepath.Join(levHome, "runs")
			write(t, filepath.Join(wd, "notes.txt"), "hello from notes")
			write(t, filepath.Join(levHome, "agents", "worker.toml"), "name = \"worker\"\nversion = \"1\"\n[stages.work]\ntools = [\"read_file\", \"write_file\", \"submit_output\"]\n")
			var mu sync.Mutex
			turn := 0
			model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				i := turn
				turn++
				mu.Unlock()
				if i >= len(tc.turns) {
					http.Error(w, "no more turns", 500)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(tc.turns[i](runsDir)))
			}))
			defer model.Close()
			cfgFile := filepath.Join(levHome, "config.toml")
			write(t, cfgFile, "[provider]\nkind = \"openai\"\nbase_url = "+quote(model.URL)+"\nmodel = \"m\"\n")
			watcher, err := levconfig.NewWatcher(cfgFile, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			log := &logBuf{}
			eng := &runner.Engine{Store: &runner.Store{Dir: runsDir}, AgentsDir: filepath.Join(levHome, "agents"),
				Config: watcher.Current, Home: root, Log: log.Printf,
				NewGate: taintgate.Factory, NewExecutor: sandboxexec.Factory}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() {
				served <- (&Server{Engine: eng, Watcher: watcher, Token: token, Log: log.Printf}).Serve(ctx, ln)
			}()
			defer func() { cancel(); <-served }()
			client := &Client{Base: "http://" + ln.Addr().String(), Token: token}

			rec, err := client.Spawn(ctx, runner.Spec{Agent: "worker", Workdir: wd})
			if err != nil {
				t.Fatal(err)
			}
			// Wait on the daemon's log rather than the API: a run whose run.json cannot be
			// written cannot report through it.
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(log.String(), "run "+rec.ID+": completed") && !strings.Contains(log.String(), "run "+rec.ID+": failed") {
				if time.Now().After(deadline) {
					t.Fatalf("run did not end; log:\n%s", log)
				}
				time.Sleep(20 * time.Millisecond)
			}
			got, err := client.Get(ctx, rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tc.status {
				t.Fatalf("status %s (want %s): %s", got.Status, tc.status, got.Error)
			}
			for _, w := range tc.errWant {
				if !strings.Contains(got.Error, w) {
					t.Errorf("run error %q lacks %q", got.Error, w)
				}
			}
			if tc.logWant != "" && !strings.Contains(log.String(), tc.logWant) {
				t.Errorf("daemon log lacks %q:\n%s", tc.logWant, log)
			}
			runDir := filepath.Join(runsDir, rec.ID)
			for _, f := range tc.files {
				b, err := os.ReadFile(filepath.Join(runDir, f))
				if err != nil {
					t.Errorf("record file %s: %v", f, err)
					continue
				}
				if strings.HasSuffix(f, ".json") && !json.Valid(b) {
					t.Errorf("record file %s is not JSON", f)
				}
			}
			if tc.check != nil {
				tc.check(t, runDir)
			}
		})
	}
}

func readCalls(t *testing.T, runDir string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(runDir, "stages/0/tool_calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if !json.Valid(sc.Bytes()) {
			t.Fatalf("tool_calls.jsonl line is not JSON: %.200s", sc.Bytes())
		}
		out = append(out, sc.Text())
	}
	return out
}
