package pipeline

import (
	"io"
	"sync"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/taint/labels"
)

// RunEnv is what a gate or executor factory gets when a run spawns (or resumes).
type RunEnv struct {
	RunID     string
	Agent     string
	Workdir   string // real
	RunDir    string // runs/<id>/; stage n's directory is RunDir/stages/<n>/
	Blueprint *blueprint.Blueprint
	Config    *levconfig.Config
	Yolo      bool
	Asker     Asker // nil: headless
	// Log writes a line to the daemon's log.
	Log func(format string, args ...any)
	// Labels keeps the taint labels of data stored outside the run's context (run records,
	// files the file tools write); nil: none are kept or consulted.
	Labels *labels.Store
}

// GateFactory makes a run's gate. An error fails the spawn.
type GateFactory func(env *RunEnv) (Gate, error)

// ExecutorFactory makes a run's executor. An error fails the spawn (on_unavailable =
// "error"); if the executor is an io.Closer it is closed when the run ends (containers
// torn down).
type ExecutorFactory func(env *RunEnv) (Executor, error)

var (
	hookMu      sync.Mutex
	gateFactory GateFactory
	execFactory ExecutorFactory
)

// RegisterGate installs the taint gate for every later run (call it from an init).
func RegisterGate(f GateFactory) { hookMu.Lock(); gateFactory = f; hookMu.Unlock() }

// RegisterExecutor installs the shell executor for every later run.
func RegisterExecutor(f ExecutorFactory) { hookMu.Lock(); execFactory = f; hookMu.Unlock() }

// NewGate builds the registered gate, or the pass-through default.
func NewGate(env *RunEnv) (Gate, error) {
	hookMu.Lock()
	f := gateFactory
	hookMu.Unlock()
	if f == nil {
		return PassThrough{}, nil
	}
	return f(env)
}

// NewExecutor builds the registered executor, or the host executor.
func NewExecutor(env *RunEnv) (Executor, error) {
	hookMu.Lock()
	f := execFactory
	hookMu.Unlock()
	if f == nil {
		return HostExecutor{}, nil
	}
	return f(env)
}

// Close closes x if it is an io.Closer.
func Close(x any) error {
	if c, ok := x.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
