package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

// TestServeRefusesWithoutSecuritySteps: a daemon whose engine lacks the taint gate or the
// sandbox executor does not serve at all; with both it serves (positive control).
func TestServeRefusesWithoutSecuritySteps(t *testing.T) {
	cases := []struct {
		name string
		gate pipeline.GateFactory
		exec pipeline.ExecutorFactory
		err  string
	}{
		{"no gate", nil, sandboxexec.Factory, "refusing to start: no taint gate is wired into this lev (Engine.NewGate is nil)"},
		{"no executor", taintgate.Factory, nil, "refusing to start: no sandbox executor is wired into this lev (Engine.NewExecutor is nil)"},
		{"both", taintgate.Factory, sandboxexec.Factory, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg, _ := levconfig.Parse(filepath.Join(dir, "config.toml"), nil)
			eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(dir, "runs")}, AgentsDir: dir,
				Config: func() *levconfig.Config { return cfg }, NewGate: c.gate, NewExecutor: c.exec}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			srv := &Server{Engine: eng, Token: token}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx, ln) }()
			client := &Client{Base: "http://" + ln.Addr().String(), Token: token}
			if c.err != "" {
				// Serve returns at once, before ctx ends: it never served.
				select {
				case err := <-done:
					cancel()
					if err == nil || err.Error() != c.err {
						t.Fatalf("Serve: %v, want %q", err, c.err)
					}
				case <-time.After(5 * time.Second):
					cancel()
					t.Fatal("a daemon without its security steps is serving")
				}
				return
			}
			var herr error
			for i := 0; i < 100; i++ {
				if herr = client.Health(context.Background()); herr == nil {
					break
				}
			}
			cancel()
			if herr != nil {
				t.Fatalf("wired daemon did not serve: %v", herr)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAPIBodiesDecodeStrictly: the API's JSON bodies are decoded like tool arguments: a
// key in another case or a key twice is a 400 naming it (encoding/json alone would take
// "Yolo" as yolo, the last one winning). Control: the same body spelled plainly passes
// decoding (and is refused later, for the missing blueprint, with 422).
func TestAPIBodiesDecodeStrictly(t *testing.T) {
	e := start(t, "")
	post := func(path, body string) (int, string) {
		req, _ := http.NewRequest("POST", e.base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wd := strconv.Quote(e.wd)
	cases := []struct {
		path, body string
		code       int
		want       string
	}{
		{"/api/agents", `{"agent": "nope", "workdir": ` + wd + `, "yolo": false, "Yolo": true}`, 400, `arguments \"yolo\" and \"Yolo\" are the same key`},
		{"/api/agents", `{"agent": "nope", "workdir": ` + wd + `, "YOLO": true}`, 400, `unknown argument \"YOLO\"`},
		{"/api/agents", `{"agent": "nope", "workdir": ` + wd + `, "yolo": false, "yolo": true}`, 400, `argument \"yolo\" appears twice`},
		{"/api/agents/r-x/resume", `{"Interactive": true}`, 400, `unknown argument \"Interactive\"`},
		{"/api/agents/r-x/answer", `{"question": "q1", "answer": "deny", "Answer": "session"}`, 400, `arguments \"answer\" and \"Answer\"`},
		{"/api/agents", `{"agent": "nope", "workdir": ` + wd + `, "yolo": true}`, 422, `no blueprint for agent`},
	}
	for _, c := range cases {
		code, body := post(c.path, c.body)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %s, want %d %s", c.path, c.body, code, body, c.code, c.want)
		}
	}
}
