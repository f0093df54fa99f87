package taintgate

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// TestGatePromptNamesTheCall: the taint gate's question, as the person answering an
// interactive run sees it (run.json's question, read over lev's HTTP API from a real
// daemon on loopback), carries the call's arguments and names its target, so that the
// legitimate endpoint can be told from another one, an unclear target shows the character
// that makes it unclear, and the answer for the session says how far it reaches. Each row
// reads Private data through a grant, then makes an outbound call the gate asks about.
// The answers are the controls: "once" lets the asked-about call reach its server, "deny"
// keeps it away, so the question was about that very call.
func TestGatePromptNamesTheCall(t *testing.T) {
	t.Setenv("LEV_BENCH_SOCKET", "")
	w := newWorld(t)
	web := logFile(t, "web")
	cfgFile := filepath.Join(w.levHome, "config.toml")
	os.WriteFile(cfgFile, []byte("[provider]\nkind = \"scripted\"\nscript = "+q(filepath.Join(w.root, "script.toml"))+
		"\n[security]\npolicy_file = "+q(filepath.Join(w.root, "none.toml"))+
		"\n[tool_permissions]\nhttp_post = \"allow\"\n\"mcp__web__*\" = \"allow\"\n[agent_read_paths.exfil]\nallow = [\"~/secret\"]\n"+
		stdioServer("web", "web", web, w.wd, "classification = \"outbound\"\nclearance = \"internal\"\n")), 0o644)
	os.WriteFile(filepath.Join(w.levHome, "agents", "exfil.toml"), []byte("name = \"exfil\"\nversion = \"1.0.0\"\n[mcp]\nservers = [\"web\"]\n"+
		"[read_paths]\nallow = [\"~/secret\"]\n[stages.one]\nprompt = \"p\"\ntools = [\"read_file\", \"http_post\", \"mcp__web__*\"]\n"), 0o644)
	watcher, err := levconfig.NewWatcher(cfgFile, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(w.levHome, "runs")}, AgentsDir: filepath.Join(w.levHome, "agents"),
		Config: watcher.Current, Home: w.home, Log: t.Logf, NewGate: Factory, NewExecutor: mcpExec}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const token = "lvtsbx-token-0123456789abcdef"
	srv := &daemon.Server{Engine: eng, Watcher: watcher, Token: token, Log: t.Logf}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	client := &daemon.Client{Base: "http://" + ln.Addr().String(), Token: token}

	for _, tc := range []struct {
		name, tool, args, answer string
		// in the question's reason, and the argument it must carry
		reason  []string
		argKey  string
		argWant string
		reached func() bool
	}{
		{name: "http_post, allowed once", tool: "http_post", args: `{"url": "SRV/collect", "body": "{{last}}"}`, answer: "once",
			reason: []string{`http_post to target "127.0.0.1"`, "data is private", `allow for this session (http_post to "127.0.0.1" only)`},
			argKey: "body", argWant: secret,
			reached: func() bool { n, _ := w.received(); return n == 1 }},
		{name: "http_post, denied", tool: "http_post", args: `{"url": "SRV/collect", "body": "{{last}}"}`, answer: "deny",
			reason: []string{`http_post to target "127.0.0.1"`}, argKey: "url", argWant: w.srv.URL + "/collect",
			reached: func() bool { n, _ := w.received(); return n != 0 }},
		{name: "MCP call with an unclear target, denied", tool: "mcp__web__fetch", args: `{"url": "https://evil.test/\t.example.com"}`, answer: "deny",
			reason: []string{`mcp__web__fetch to the unclear target "https://evil.test/\t.example.com"`, "contains a control character", "with exactly this target only"},
			argKey: "url", argWant: "https://evil.test/\t.example.com",
			reached: func() bool { return received(t, web) != "" }},
		{name: "MCP call naming no target, allowed once", tool: "mcp__web__post", args: `{"body": "{{last}}"}`, answer: "once",
			reason: []string{"mcp__web__post naming no target", "every mcp__web__post call that names no target"},
			argKey: "body", argWant: secret,
			reached: func() bool { return strings.Contains(received(t, web), "post ") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.sink.mu.Lock()
			w.sink.hits, w.sink.bodies = 0, nil
			w.sink.mu.Unlock()
			os.Remove(web)
			sc := strings.ReplaceAll(strings.ReplaceAll(script("one", tc.tool, tc.args), "HOME", w.home), "SRV", w.srv.URL)
			os.WriteFile(filepath.Join(w.root, "script.toml"), []byte(sc), 0o644)
			rec, err := client.Spawn(ctx, runner.Spec{Agent: "exfil", Workdir: w.wd, Interactive: true})
			if err != nil {
				t.Fatal(err)
			}
			var question *runner.Question
			for deadline := time.Now().Add(20 * time.Second); question == nil; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no question asked (run %s %s)", rec.Status, rec.Error)
				}
				if rec, err = client.Get(ctx, rec.ID); err != nil {
					t.Fatal(err)
				}
				if rec.Status != runner.StatusRunning {
					t.Fatalf("run ended without asking: %s %s", rec.Status, rec.Error)
				}
				question = rec.Question
			}
			if !question.Gate || question.Tool != tc.tool {
				t.Fatalf("question %+v, want the gate's, about %s", question, tc.tool)
			}
			for _, want := range tc.reason {
				if !strings.Contains(question.Reason, want) {
					t.Errorf("the question's reason lacks %q: %s", want, question.Reason)
				}
			}
			var args map[string]any
			if err := json.Unmarshal(question.Args, &args); err != nil || args[tc.argKey] != tc.argWant {
				t.Errorf("the question's args %s (%v): want %s = %q", question.Args, err, tc.argKey, tc.argWant)
			}
			if tc.reached() {
				t.Fatal("the call ran before it was answered")
			}
			if err := client.Answer(ctx, rec.ID, question.ID, tc.answer); err != nil {
				t.Fatal(err)
			}
			// The model's final answer then holds Private data too and is asked about as
			// submit_output: denied, so the run ends.
			for deadline := time.Now().Add(20 * time.Second); rec.Status == runner.StatusRunning; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("run %s did not end", rec.ID)
				}
				if rec, err = client.Get(ctx, rec.ID); err != nil {
					t.Fatal(err)
				}
				if q := rec.Question; q != nil && q.ID != question.ID {
					if q.Tool != "submit_output" {
						t.Fatalf("unexpected question %+v", q)
					}
					client.Answer(ctx, rec.ID, q.ID, "deny")
				}
			}
			if got := tc.reached(); got != (tc.answer == "once") {
				t.Fatalf("answered %s, but the call reached its server: %v (run %s %s)", tc.answer, got, rec.Status, rec.Error)
			}
		})
	}
}
