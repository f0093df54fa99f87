// Package sandboxexec runs the lev pipeline's shell tool in the configured sandbox.
// lev serve passes Factory to the run engine explicitly; nothing registers itself.
//
// The effective [sandbox] of a stage is the blueprint's (agent table, then the stage's
// keys over it) merged with the user's config.toml [sandbox] by sandbox.Merge: the
// blueprint tightens, never loosens, and never picks the engine. Every stage's sandbox is
// checked when the run spawns, so on_unavailable = "error" fails the spawn with the reason.
//
// It owns the step from a stage's merged [sandbox] to the Executor the pipeline's shell
// uses. It must not register itself by import side effect, and must not run a command
// anywhere but the sandbox that merge chose (or fail the spawn).
package sandboxexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/lever-jail/lever/internal/lev/bench"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/sandbox"
)

// Factory is the engine's ExecutorFactory: one executor per run, with the engine
// options from the daemon's environment.
func Factory(env *pipeline.RunEnv) (pipeline.Executor, error) {
	o, err := OptionsFromEnv()
	if err != nil {
		return nil, err
	}
	x, err := New(context.Background(), env, o)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return x, nil
}

// OptionsFromEnv reads the host-side engine settings from the daemon's environment (the
// user's, never a blueprint's): LEV_SANDBOX_ENGINE_ARGS (global engine flags, e.g.
// "--runtime runc"), LEV_SANDBOX_RUN_ARGS (extra run flags), LEV_SANDBOX_PIDS_LIMIT and
// LEV_SANDBOX_MEMORY; and LEV_BENCH_SOCKET, the workbench's exec channel, which then runs
// every command of every kind.
func OptionsFromEnv() (sandbox.Options, error) {
	o := sandbox.Options{
		EngineArgs:  strings.Fields(os.Getenv("LEV_SANDBOX_ENGINE_ARGS")),
		RunArgs:     strings.Fields(os.Getenv("LEV_SANDBOX_RUN_ARGS")),
		Memory:      os.Getenv("LEV_SANDBOX_MEMORY"),
		BenchSocket: os.Getenv(bench.Env),
	}
	if o.BenchSocket != "" && !filepath.IsAbs(o.BenchSocket) {
		return o, fmt.Errorf("%s=%q: want an absolute path", bench.Env, o.BenchSocket)
	}
	if s := os.Getenv("LEV_SANDBOX_PIDS_LIMIT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("LEV_SANDBOX_PIDS_LIMIT=%q: want a positive number", s)
		}
		o.PidsLimit = n
	}
	return o, nil
}

// Executor is one run's sandboxed shell.
type Executor struct {
	m       *sandbox.Manager
	user    sandbox.Config
	workdir string
	log     func(string, ...any)

	mu     sync.Mutex
	warned map[string]bool
}

// New builds the executor for a run and checks every stage's sandbox.
func New(ctx context.Context, env *pipeline.RunEnv, o sandbox.Options) (*Executor, error) {
	x := &Executor{workdir: env.Workdir, log: env.Log, warned: map[string]bool{}}
	if x.log == nil {
		x.log = func(string, ...any) {}
	}
	if env.Config != nil && env.Config.Sandbox != nil {
		x.user = *env.Config.Sandbox
	}
	if err := x.user.Validate(); err != nil {
		return nil, fmt.Errorf("config.toml [sandbox]: %w", err)
	}
	if o.Engine == "" {
		o.Engine = x.user.Engine
	}
	if o.RunID == "" {
		o.RunID = env.RunID
	}
	o.Logf = x.log
	x.m = sandbox.NewManager(o)
	if env.Blueprint == nil {
		return x, nil
	}
	for _, st := range env.Blueprint.Order {
		bp := blueprintSandbox(env.Blueprint.Sandbox, st.Sandbox)
		cfg := x.effective(bp)
		err := x.m.Check(ctx, cfg)
		var ue *sandbox.UnavailableError
		switch {
		case err == nil:
		case errors.As(err, &ue) && cfg.OnUnavailable == sandbox.OnUnavailableWarn:
			x.log("stage %s: sandbox %s unavailable (%s); on_unavailable = \"warn\": its commands run on the host", st.Name, ue.Kind, ue.Reason)
		default:
			x.m.Close()
			return nil, fmt.Errorf("stage %s: %w", st.Name, err)
		}
	}
	return x, nil
}

func blueprintSandbox(agent, stage *sandbox.Config) sandbox.Config {
	var a, s sandbox.Config
	if agent != nil {
		a = *agent
	}
	if stage != nil {
		s = *stage
	}
	return sandbox.Overlay(a, s)
}

// effective merges the user's settings with the blueprint's for one stage, logging each
// note (something the blueprint asked for and did not get) once.
func (x *Executor) effective(bp sandbox.Config) sandbox.Config {
	cfg, notes := sandbox.Merge(x.user, bp)
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, n := range notes {
		if !x.warned[n] {
			x.warned[n] = true
			x.log("sandbox: %s", n)
		}
	}
	return cfg
}

// Shell runs one command in the stage's sandbox.
func (x *Executor) Shell(ctx context.Context, req pipeline.ShellRequest) (pipeline.ShellResult, error) {
	var bp sandbox.Config
	if req.Stage.Sandbox != nil {
		bp = *req.Stage.Sandbox
	}
	cfg := x.effective(bp)
	ex, err := x.m.ExecutorMasked(ctx, cfg, x.workdir, req.Mask)
	if err != nil {
		return pipeline.ShellResult{}, err
	}
	if ex.Kind() == sandbox.KindNone {
		return pipeline.HostExecutor{}.Shell(ctx, req)
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	var out, errb pipeline.CappedBuffer
	out.Max, errb.Max = pipeline.MaxResultBytes, pipeline.MaxResultBytes
	c := sandbox.Command{Script: req.Command, Dir: req.Dir, Stdout: &out, Stderr: &errb, Mask: req.Mask}
	if ex.Kind() != sandbox.KindContainer {
		// A namespace (or the "warn" fallback to the host) shares the host's filesystem
		// and binaries, so it gets the scrubbed host environment the host executor would;
		// never the daemon's own (which holds lev's token). A container keeps its image's.
		// The workbench runs a command with exactly the environment sent: the scrubbed one.
		c.Env = req.Env
		if c.Env == nil {
			c.Env = []string{}
		}
	}
	res, err := ex.Run(ctx, c)
	sr := pipeline.ShellResult{Stdout: out.Bytes(), Stderr: errb.Bytes(), ExitCode: res.ExitCode}
	if ctx.Err() != nil {
		sr.Stderr = append(sr.Stderr, []byte("\n[killed: timeout]")...)
		if sr.ExitCode == 0 {
			sr.ExitCode = -1
		}
		return sr, nil
	}
	return sr, err
}

// Close tears down the run's containers; the runner calls it when the run ends.
func (x *Executor) Close() error { return x.m.Close() }

// Containers lists the run's warm containers.
func (x *Executor) Containers() []string { return x.m.Containers() }

// StartProcess starts a long-lived process with streams (a stdio MCP server) in the
// stage's sandbox, as `cd DIR && exec ARGV` under the same `sh -c` a shell command gets:
// the same kind, network setting, container, namespaces and masks of lev's state; with
// LEV_BENCH_SOCKET set, in the workbench through the exec channel's stream mode, never in
// lev's own container.
//
// The sandbox itself is set up from the run's workdir, as for a shell command (the mask
// script keeps the workdir writable around a read-only ancestor by its current directory;
// a container's -w and the workbench's default directory are the workdir), and only then
// does the process change to req.Dir: a server must not start in the workdir, whose files
// the agent writes and a launcher would load (mcprun.ServerDir).
func (x *Executor) StartProcess(ctx context.Context, req pipeline.ProcessRequest) (pipeline.Process, error) {
	if len(req.Argv) == 0 {
		return nil, errors.New("no command to start")
	}
	if !filepath.IsAbs(req.Dir) {
		// Empty would leave the process where the sandbox started it: the workdir.
		return nil, fmt.Errorf("the process's working directory %q is not an absolute path", req.Dir)
	}
	var bp sandbox.Config
	if req.Stage.Sandbox != nil {
		bp = *req.Stage.Sandbox
	}
	cfg := x.effective(bp)
	ex, err := x.m.ExecutorMasked(ctx, cfg, x.workdir, req.Mask)
	if err != nil {
		return nil, err
	}
	env := req.Env
	if env == nil {
		env = []string{}
	}
	// The executor starts the command on its own goroutine, after this returns and the
	// caller has closed its ends: it gets duplicates of its own, closed when it is done.
	var files []*os.File
	for _, f := range []*os.File{req.Stdin, req.Stdout, req.Stderr} {
		fd, err := syscall.Dup(int(f.Fd()))
		if err != nil {
			for _, g := range files {
				g.Close()
			}
			return nil, fmt.Errorf("duplicating the server's streams: %w", err)
		}
		syscall.CloseOnExec(fd)
		files = append(files, os.NewFile(uintptr(fd), f.Name()))
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &sandboxProcess{cancel: cancel, done: make(chan struct{})}
	go func() {
		_, p.err = ex.Run(pctx, sandbox.Command{Script: "cd " + shellQuote([]string{req.Dir}) + " && exec " + shellQuote(req.Argv), Dir: x.workdir, Env: env,
			Stdin: files[0], Stdout: files[1], Stderr: files[2], Mask: req.Mask})
		for _, f := range files {
			f.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// sandboxProcess is a process an executor runs until Kill.
type sandboxProcess struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (p *sandboxProcess) Wait() error { <-p.done; return p.err }

// Kill ends it: the executor kills the command on its context's end (a namespace's PID 1,
// and with it everything it started; a container's exec'd processes).
func (p *sandboxProcess) Kill() { p.cancel() }

// shellQuote quotes argv for sh: each word in single quotes.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
