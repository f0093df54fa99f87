package daemon

import (
	"context"
	"net"
	"path/filepath"
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
