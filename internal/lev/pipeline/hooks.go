package pipeline

import (
	"io"

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

// GateFactory makes a run's gate. An error fails the spawn. There is no default and no
// registry: whoever builds the engine passes the taint gate's factory in (cmd/lev via
// lev serve), and an engine without one refuses to start.
type GateFactory func(env *RunEnv) (Gate, error)

// ExecutorFactory makes a run's executor, passed in like GateFactory (required). An error fails the spawn (on_unavailable =
// "error"); if the executor is an io.Closer it is closed when the run ends (containers
// torn down).
type ExecutorFactory func(env *RunEnv) (Executor, error)

// Close closes x if it is an io.Closer.
func Close(x any) error {
	if c, ok := x.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
