package runner

import (
	"context"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

// hostExec is the tests' executor: shell on the host (the real lev wires the sandbox).
func hostExec(*pipeline.RunEnv) (pipeline.Executor, error) { return pipeline.HostExecutor{}, nil }

// allowAll is the engine tests' gate: these tests are about the engine, the fence and
// seeds, not taint (the taintgate package's suites run the real gate through the engine).
type allowAll struct{}

func (allowAll) Check(context.Context, *pipeline.Call) (pipeline.Decision, error) {
	return pipeline.Decision{Allow: true, Source: "test-allow-all"}, nil
}
func (allowAll) Observe(context.Context, *pipeline.Call, *pipeline.Result) {}

func allowAllGate(*pipeline.RunEnv) (pipeline.Gate, error) { return allowAll{}, nil }

// wired gives a test engine a gate that passes everything and the host executor.
func wired(e *Engine) *Engine {
	e.NewGate, e.NewExecutor = allowAllGate, hostExec
	return e
}

// TestEngineRequiresGateAndExecutor: an engine missing either security step refuses to
// spawn anything, with the reason; the same engine with both runs (positive control).
func TestEngineRequiresGateAndExecutor(t *testing.T) {
	cases := []struct {
		name string
		gate pipeline.GateFactory
		exec pipeline.ExecutorFactory
		err  string
	}{
		{"no gate", nil, hostExec, "refusing to start: no taint gate is wired into this lev (Engine.NewGate is nil)"},
		{"no executor", taintgate.Factory, nil, "refusing to start: no sandbox executor is wired into this lev (Engine.NewExecutor is nil)"},
		{"neither", nil, nil, "no taint gate"},
		{"gate factory returns nothing", func(*pipeline.RunEnv) (pipeline.Gate, error) { return nil, nil }, hostExec, "taint gate: the factory returned no gate"},
		{"both", taintgate.Factory, hostExec, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, wd := newEngine(t, okBlueprint, okProvider())
			e.NewGate, e.NewExecutor = c.gate, c.exec
			verr := e.Validate()
			rec, err := e.Start(context.Background(), Spec{Agent: "a", Workdir: wd})
			if c.err == "" {
				if verr != nil || err != nil {
					t.Fatalf("wired engine: %v / %v", verr, err)
				}
				e.Wait()
				rec, _ = e.Store.Load(rec.ID)
				if rec.Status != StatusCompleted {
					t.Fatalf("status %s: %s", rec.Status, rec.Error)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Start error %v, want %q", err, c.err)
			}
			if c.gate == nil || c.exec == nil {
				if verr == nil || !strings.Contains(verr.Error(), c.err) {
					t.Fatalf("Validate error %v, want %q", verr, c.err)
				}
			}
			if recs, _ := e.Store.List(); len(recs) != 0 {
				t.Fatalf("a refused engine recorded runs: %+v", recs)
			}
		})
	}
}

const okBlueprint = "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"list_dir\"]\n"

func okProvider() provider.Provider {
	return &provider.Scripted{Rules: []provider.Rule{{Text: "plain answer"}}}
}
