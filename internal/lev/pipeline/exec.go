package pipeline

import (
	"bytes"
	"context"
	"errors"
	"github.com/lever-jail/lever/internal/lev/deathsig"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/lev/sandbox"
)

// ShellRequest is one shell command to run.
type ShellRequest struct {
	Command string
	Dir     string // the run's real workdir
	Env     []string
	Timeout time.Duration
	Stage   Stage // carries the stage's [sandbox] settings
	// Mask is lev's own state (absolute, resolved paths) to hide from the command: every
	// executor must honour it or refuse to run (sandbox.MaskArgv, container mounts).
	Mask []string
}

// ShellResult is its outcome; output is capped at MaxResultBytes per stream.
type ShellResult struct {
	Stdout, Stderr []byte
	ExitCode       int
}

// Executor runs shell commands (step 5). There is no default: the engine is given the
// sandbox executor's factory (sandboxexec.Factory), which uses HostExecutor only where the
// user's [sandbox] says kind = "none" or on_unavailable = "warn".
type Executor interface {
	Shell(ctx context.Context, req ShellRequest) (ShellResult, error)
}

// HostExecutor runs sh -c on the host, as lev's user, in the workdir.
type HostExecutor struct{}

// Shell runs the command in its own process group, killed whole on timeout.
func (HostExecutor) Shell(ctx context.Context, req ShellRequest) (ShellResult, error) {
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	argv := []string{"sh", "-c", req.Command}
	if len(req.Mask) > 0 {
		unshare, err := sandbox.CheckMask(ctx, nil)
		if err != nil {
			return ShellResult{}, err
		}
		argv = sandbox.MaskArgv(unshare, true, req.Mask, req.Command)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = req.Dir
	cmd.Env = req.Env
	// Pdeathsig: the command dies with lev, even when lev is killed (sandbox.runner's rule).
	cmd.SysProcAttr = deathsig.Set(&syscall.SysProcAttr{Setpgid: true})
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	var out, errb CappedBuffer
	out.Max, errb.Max = MaxResultBytes, MaxResultBytes
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := ShellResult{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
		if ctx.Err() != nil {
			res.Stderr = append(res.Stderr, []byte("\n[killed: timeout]")...)
		}
	default:
		return res, err
	}
	return res, nil
}

// CappedBuffer keeps the first Max bytes written and drops the rest (noting it).
type CappedBuffer struct {
	Max int
	buf bytes.Buffer
	cut bool
}

func (c *CappedBuffer) Write(p []byte) (int, error) {
	if room := c.Max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
			c.cut = true
		} else {
			c.buf.Write(p)
		}
	} else if len(p) > 0 {
		c.cut = true
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (c *CappedBuffer) Bytes() []byte {
	if c.cut {
		return append(c.buf.Bytes(), []byte("\n[output truncated]")...)
	}
	return c.buf.Bytes()
}

// ProcessRequest is a long-lived process with its standard streams (a stdio MCP server),
// started in the same sandbox a shell command of the run gets.
type ProcessRequest struct {
	Argv []string
	// Dir is the process's working directory (absolute). The sandbox is set up from the
	// run's workdir either way; the process changes to Dir before it starts. A stdio MCP
	// server's is mcprun.ServerDir, never the workdir.
	Dir   string
	Env   []string // its whole environment; nothing of lev's is added
	Stage Stage    // the sandbox settings to use
	// Mask is lev's own state, hidden from the process as from a shell command.
	Mask                  []string
	Stdin, Stdout, Stderr *os.File
}

// Process is a started process.
type Process interface {
	Wait() error
	Kill()
}

// ProcessStarter is an Executor that can also start a process with streams. An executor
// that cannot (or cannot for the stage's sandbox) says why, and the server does not start:
// there is no fallback to running it unsandboxed.
type ProcessStarter interface {
	StartProcess(ctx context.Context, req ProcessRequest) (Process, error)
}
