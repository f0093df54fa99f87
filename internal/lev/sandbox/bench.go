package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/lev/bench"
)

// KindBench is what runs a command when lev has a workbench ($LEV_BENCH_SOCKET): the
// workbench container, through the exec channel, whatever kind the [sandbox] names.
const KindBench = "bench"

// benchShell is the shell the workbench runs scripts with (argv[0] must be absolute).
const benchShell = "/bin/sh"

// NewBenchExecutor returns the Executor that runs every command in the workbench behind
// socket, with the network on or off (off: a new user and network namespace there, or
// the command is refused). workdir is the run's workdir, which the workbench shares;
// commands run there unless Command.Dir says otherwise.
func NewBenchExecutor(socket string, network bool, workdir string) Executor {
	return &benchExec{c: bench.Client{Socket: socket}, network: network, workdir: filepath.Clean(workdir)}
}

type benchExec struct {
	c       bench.Client
	network bool
	workdir string
}

func (b *benchExec) Kind() string { return KindBench }

// Socket is the bench's socket (tests and logs).
func (b *benchExec) Socket() string { return b.c.Socket }

func (b *benchExec) Run(ctx context.Context, c Command) (Result, error) {
	if c.Stdin != nil && c.Stdout == nil {
		return Result{}, errors.New("the workbench exec channel carries stdin only for a streaming command (stdin and stdout both given); refusing the command")
	}
	for _, p := range c.Mask {
		// The workbench mounts the agent's part of the tree and nothing of lev's, so the
		// mask has nothing to hide there; but lev's state inside the tree would be in the
		// workbench too, and no mount there hides it.
		if fspath.Within(b.workdir, filepath.Clean(p)) {
			return Result{}, fmt.Errorf("lev's state %s lies in the workdir %s, which the workbench shares: refusing to run commands there (keep LEV_HOME and lev's settings out of the tree)", p, b.workdir)
		}
	}
	dir := c.Dir
	if dir == "" {
		dir = b.workdir
	}
	deadline := bench.MaxDeadline
	if d, ok := ctx.Deadline(); ok {
		deadline = time.Until(d)
	}
	if deadline > bench.MaxDeadline {
		deadline = bench.MaxDeadline
	}
	ms := (deadline + time.Millisecond - 1).Milliseconds()
	if ms < 1 {
		return Result{ExitCode: -1}, fmt.Errorf("the command's deadline has passed: %w", context.DeadlineExceeded)
	}
	network := b.network
	req := bench.Request{Argv: []string{benchShell, "-c", c.Script}, Dir: dir,
		Env: benchEnv(c.Env), DeadlineMS: ms, Network: &network,
		StdoutMax: bench.MaxOutput, StderrMax: bench.MaxOutput}
	if c.Stdin != nil {
		// A long-lived command with its streams (a stdio MCP server): its stdin and stdout
		// cross the channel as they come; it ends when ctx does (the connection closes,
		// the bench kills it) or when it exits.
		done, err := b.c.Stream(ctx, req, c.Stdin, c.Stdout)
		if err != nil {
			return Result{ExitCode: -1}, err
		}
		return Result{}, <-done
	}
	resp, err := b.c.Run(ctx, req)
	if err != nil {
		return Result{ExitCode: -1}, err
	}
	res := Result{ExitCode: resp.ExitCode}
	stderr := resp.Stderr
	if resp.TimedOut && ctx.Err() == nil {
		stderr = append(stderr, "\n[killed: timeout]"...)
	}
	res.Stdout = deliver(c.Stdout, resp.Stdout, resp.StdoutTruncated)
	res.Stderr = deliver(c.Stderr, stderr, resp.StderrTruncated)
	if resp.Error != "" {
		return res, fmt.Errorf("bench %s: %s", b.c.Socket, resp.Error)
	}
	return res, nil
}

// benchPath is the workbench's PATH: the Debian userland's directories.
const benchPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// benchEnv is a command's environment in the workbench: what lev would give it, less what
// describes lev's own container (its PATH of "/", its home, its LEV_* and LEVER_* paths,
// which name files the workbench does not have), with the workbench's PATH and a HOME on
// its writable tmpfs. The token never reaches here: the pipeline scrubbed it already.
func benchEnv(env []string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH", k == "HOME", k == "SSL_CERT_DIR", strings.HasPrefix(k, "LEV_"), strings.HasPrefix(k, "LEVER_"), strings.HasPrefix(k, "GIT_CONFIG_"):
			continue
		}
		out = append(out, kv)
	}
	// The tree's owner is rarely the workbench's uid, and git refuses such a repository
	// unless it is marked safe in command-scope config (the same variables the workbench
	// container carries for lever shell: internal/containers BenchGitEnv). The tree is the agent's.
	return append(out, benchPath, "HOME=/tmp", "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*")
}

// truncatedNote marks output the bench cut (the same words lev's capped buffers use).
const truncatedNote = "\n[output truncated]"

// deliver writes what the bench kept to w (a capped sink sees the note as more than it
// keeps, and marks its own output cut), or returns it for Result when w is nil.
func deliver(w io.Writer, b []byte, cut bool) []byte {
	if cut {
		b = append(b, truncatedNote...)
	}
	if w == nil {
		return b
	}
	w.Write(b)
	return nil
}

// checkBench is Check with a workbench: the bench must answer, and with the network off
// it must be able to make the namespace, or the run fails to spawn (never a later call).
func (m *Manager) checkBench(ctx context.Context, cfg Config) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ex := NewBenchExecutor(m.o.BenchSocket, cfg.NetworkOn(), "/")
	res, err := ex.Run(ctx, Command{Script: "exit 0", Env: []string{}})
	if err != nil {
		return fmt.Errorf("sandbox (workbench, network %s): %w", onOff(cfg.NetworkOn()), err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("sandbox (workbench, network %s): a probe command exited %d: %s", onOff(cfg.NetworkOn()), res.ExitCode, res.Stderr)
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// benchNote tells the user once per setting that the workbench, not the [sandbox] kind's
// own mechanism, runs the commands (an image or mounts named there do not apply).
func (m *Manager) benchNote(cfg Config) {
	if cfg.Kind != KindContainer && len(cfg.AllMounts()) == 0 {
		return
	}
	key := cfg.Kind + " " + cfg.Image
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.noted == nil {
		m.noted = map[string]bool{}
	}
	if !m.noted[key] {
		m.noted[key] = true
		m.o.Logf("sandbox: kind %q: the workbench (%s) runs the commands; the [sandbox] image and mounts do not apply there", cfg.Kind, m.o.BenchSocket)
	}
}
