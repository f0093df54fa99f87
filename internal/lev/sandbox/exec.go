package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/lever-jail/lever/internal/lev/deathsig"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Command is one shell command a tool runs in the sandbox.
type Command struct {
	// Script runs under `sh -c`.
	Script string
	// Dir is the working directory: the workdir or a directory inside it. Containers see
	// the workdir at the same path, so the same Dir works in every kind.
	Dir   string
	Env   []string
	Stdin io.Reader
	// Stdout and Stderr, when set, receive the output instead of Result (a tool that caps
	// output passes capped writers).
	Stdout, Stderr io.Writer
	// Mask are lev's own state (absolute, resolved paths): hidden from the command in
	// every kind (see mask.go; a container never mounts them).
	Mask []string
	// extraFiles are passed to the process as fd 3 on (the keep-alive's pipe end).
	extraFiles []*os.File
}

// Result is a finished command. A non-zero exit is a Result, not an error.
type Result struct {
	Stdout, Stderr []byte
	ExitCode       int
}

// Executor runs commands in one sandbox.
type Executor interface {
	Run(ctx context.Context, c Command) (Result, error)
	// Kind is what actually runs the commands: container, namespace or none (a "warn"
	// fallback reports none).
	Kind() string
}

// runner starts processes, as a given user when the daemon runs sandboxes for one.
type runner struct {
	cred *syscall.Credential
	env  []string
}

func (r runner) command(ctx context.Context, argv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if !strings.ContainsRune(argv[0], '/') {
		// The engine or sh by name: only from where lev's user cannot replace it.
		if p, err := TrustedLookPath(argv[0]); err == nil {
			cmd.Path, cmd.Err = p, nil
		} else {
			cmd.Err = err
		}
	}
	// Every process lev starts dies with lev. Pdeathsig: when lev (or the daemon) dies,
	// even by SIGKILL, the kernel kills this child; the sandboxes make that the end of all
	// it started (a namespace's or mask's unshare --kill-child takes its PID namespace
	// down with it). Setpgid: a kill on the context's end (a timeout, an MCP server's
	// Kill) takes the whole process group, not only the shell lev started. Go sets the
	// death signal after the credential switch, which would otherwise clear it.
	cmd.SysProcAttr = deathsig.Set(&syscall.SysProcAttr{Credential: r.cred, Setpgid: true})
	cmd.Cancel = func() error {
		// The group first (the process is its leader); the process itself in any case.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return cmd.Process.Kill()
	}
	if r.env != nil {
		cmd.Env = r.env
	}
	return cmd
}

// run runs argv to completion; only a failure to start (or a kill by ctx) is an error.
func (r runner) run(ctx context.Context, argv []string, c Command) (Result, error) {
	cmd := r.command(ctx, argv)
	if c.Dir != "" {
		cmd.Dir = c.Dir
	}
	if c.Env != nil {
		// The caller's environment replaces the daemon's (which holds lev's own token).
		cmd.Env = c.Env
	}
	// A grandchild holding the output pipes must not keep Run waiting after a kill.
	cmd.WaitDelay = 2 * time.Second
	cmd.Stdin = c.Stdin
	cmd.ExtraFiles = c.extraFiles
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if c.Stdout != nil {
		cmd.Stdout = c.Stdout
	}
	if c.Stderr != nil {
		cmd.Stderr = c.Stderr
	}
	err := cmd.Run()
	res := Result{Stdout: so.Bytes(), Stderr: se.Bytes()}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ctx.Err() == nil {
		res.ExitCode = ee.ExitCode()
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("running %s: %w", argv[0], err)
	}
	return res, nil
}

// output runs an engine subcommand and returns its stdout, or an error carrying stderr.
func (r runner) output(ctx context.Context, argv []string) (string, error) {
	res, err := r.run(ctx, argv, Command{})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("%v: exit %d: %s", argv, res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	return string(bytes.TrimSpace(res.Stdout)), nil
}

// hostExec runs on the host: kind none, or the "warn" fallback.
type hostExec struct{ r runner }

func (h hostExec) Kind() string { return KindNone }

func (h hostExec) Run(ctx context.Context, c Command) (Result, error) {
	if len(c.Mask) > 0 {
		unshare, err := CheckMask(ctx, nil)
		if err != nil {
			return Result{}, err
		}
		return h.r.run(ctx, MaskArgv(unshare, true, c.Mask, c.Script), c)
	}
	return h.r.run(ctx, []string{"sh", "-c", c.Script}, c)
}

// nsExec runs each command in fresh namespaces: a user namespace (so it works
// unprivileged), a PID namespace with its own /proc, and a network namespace holding only
// a down loopback when the network is off. It shares the host's filesystem.
type nsExec struct {
	r       runner
	unshare string
	network bool
}

func (n nsExec) Kind() string { return KindNamespace }

// NamespaceArgv is the argv that runs script in the namespace sandbox.
func NamespaceArgv(unshare string, network bool, script string) []string {
	argv := []string{unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child"}
	if !network {
		argv = append(argv, "--net")
	}
	return append(argv, "sh", "-c", script)
}

func (n nsExec) Run(ctx context.Context, c Command) (Result, error) {
	if len(c.Mask) > 0 {
		if _, err := CheckMask(ctx, func(string) (string, error) { return n.unshare, nil }); err != nil {
			return Result{}, err
		}
		return n.r.run(ctx, MaskArgv(n.unshare, n.network, c.Mask, c.Script), c)
	}
	return n.r.run(ctx, NamespaceArgv(n.unshare, n.network, c.Script), c)
}

// containerExec runs commands in a warm container with `engine exec`.
type containerExec struct {
	r      runner
	engine []string // engine binary and its global args
	name   string
}

func (e *containerExec) Kind() string { return KindContainer }

// Name is the container's name (tests and logs).
func (e *containerExec) Name() string { return e.name }

func (e *containerExec) Run(ctx context.Context, c Command) (Result, error) {
	argv := append(append([]string{}, e.engine...), "exec")
	if c.Stdin != nil {
		argv = append(argv, "-i")
	}
	if c.Dir != "" {
		argv = append(argv, "-w", c.Dir)
	}
	for _, kv := range c.Env {
		argv = append(argv, "-e", kv)
	}
	argv = append(argv, e.name, "sh", "-c", c.Script)
	// Env goes into the container via -e; Dir is the container's; the engine itself runs
	// from no particular directory.
	c.Env, c.Dir = nil, ""
	res, err := e.r.run(ctx, argv, c)
	if ctx.Err() != nil {
		// Killing the engine client does not stop what it started inside the container:
		// kill every process there but PID 1 (the keep-alive), so a timed-out command
		// cannot linger in the shared warm container.
		kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		e.r.run(kctx, append(append([]string{}, e.engine...), "exec", e.name, "kill", "-9", "-1"), Command{})
	}
	return res, err
}
