package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/hostterm"
)

// levPath is lev inside the lev container (the lev image holds it there; a user's
// manager.image must too).
const levPath = "/lev"

// benchSuffix names an agent's workbench container after its lev container.
const benchSuffix = "-bench"

// managerAgent is how the host commands name the manager; workers go by their name.
const managerAgent = "manager"

// usageErr is a refusal before anything started: exit 2 (a plain error's status), one
// line.
func usageErr(format string, a ...any) error {
	return fmt.Errorf(format, a...)
}

// agentOf checks an agent name against lever.yaml: "" and "manager" are the manager,
// anything else must be a worker. The error lists the agents there are.
func agentOf(cfg *config.Config, name string) (string, error) {
	if name == managerAgent {
		// lever.yaml accepts a worker named "manager": naming it must never land in the
		// manager, which sees the whole tree, so the name is refused as ambiguous.
		for _, w := range cfg.Workers {
			if w.Name == managerAgent {
				return "", usageErr("%s has a worker named %q: that name also means the manager, so lever will not guess; rename the worker", cfg.Path, managerAgent)
			}
		}
	}
	if name == "" || name == managerAgent {
		return managerAgent, nil
	}
	for _, w := range cfg.Workers {
		if w.Name == name {
			return name, nil
		}
	}
	return "", usageErr("worker %q is not in %s: the agents are %s", name, cfg.Path, strings.Join(agentNames(cfg), ", "))
}

func agentNames(cfg *config.Config) []string {
	out := []string{managerAgent}
	for _, w := range cfg.Workers {
		out = append(out, w.Name)
	}
	return out
}

// levContainer is the agent's lev container.
func levContainer(cfg *config.Config, agent string) string {
	if agent == managerAgent {
		return containers.ContainerName(cfg.Name, containers.Manager, "")
	}
	return containers.ContainerName(cfg.Name, containers.Worker, agent)
}

// attached is a jail that is up, reached through its backend.
type attached struct {
	cfg *config.Config
	c   execer
}

// execer is the part of *containers.Client the host commands use (tests substitute a recorder
// for argv checks; the e2e tests use the real client).
type execer interface {
	Exec(ctx context.Context, name string, o containers.ExecOptions) (int, error)
	Inspect(name string) (*containers.State, error)
}

// attachHook, when set (unit tests), replaces bring-up's Attach.
var attachHook func(cfg *config.Config) (execer, error)

// attachJail derives the instance and reaches it without changing anything. Anything
// short of a running jail is exit 2 with bring-up's "jail NAME is not up" line. bringup.New
// alone: attaching reads no lev binary, settings or image (Prepare's), only the guest.
func attachJail(cmd *cobra.Command, cfg *config.Config) (*attached, error) {
	if attachHook != nil {
		c, err := attachHook(cfg)
		if err != nil {
			return nil, err
		}
		return &attached{cfg: cfg, c: c}, nil
	}
	b, err := backend.New(cfg)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	in, err := bringup.New(bringup.Options{Cfg: cfg, Backend: b, Exe: exe, Out: io.Discard})
	if err != nil {
		return nil, err
	}
	c, err := in.Attach(ctx(cmd))
	if err != nil {
		return nil, err
	}
	return &attached{cfg: cfg, c: c}, nil
}

func ctx(cmd *cobra.Command) context.Context {
	if c := cmd.Context(); c != nil {
		return c
	}
	return context.Background()
}

// wantTTY: a terminal session only when the user is at one on both ends, so that a
// redirected output never gets the terminal's merged, \r\n-translated stream.
func wantTTY(cmd *cobra.Command) bool {
	in, ok := cmd.InOrStdin().(*os.File)
	return ok && hostterm.IsTerminal(in) && hostterm.IsTerminal(cmd.OutOrStdout())
}

// session is how a command's exec meets the host's terminal.
type session int

const (
	// noSession: stdout and stderr apart, each neutralised when it reaches a terminal.
	noSession session = iota
	// safeSession: a terminal session (lev's prompts reach the user, ^C reaches lev) whose
	// output is neutralised: lever run, resume and logs print what the agent, the model
	// and the tools wrote, and lev's renderer must not be the only guard.
	safeSession
	// rawSession: a terminal session passed as it is, for lever shell: an interactive shell the
	// user asked for, as with docker exec -it.
	rawSession
)

// sessionIf is s when the user is at a terminal (wantTTY) and want holds, else noSession.
func sessionIf(cmd *cobra.Command, want bool, s session) session {
	if want && wantTTY(cmd) {
		return s
	}
	return noSession
}

// execPass runs argv in container and passes its exit code through as lever's (lev's own
// message is already on stderr). lever's own failure to run it is exit 1: by then lever
// cannot say whether the command started.
func execPass(cmd *cobra.Command, c execer, container string, argv []string, s session, stdin bool) error {
	o := containers.ExecOptions{Argv: argv, TTY: s != noSession, Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
	switch s {
	case noSession:
		var f1, f2 func() error
		o.Stdout, f1 = safeFor(o.Stdout)
		o.Stderr, f2 = safeFor(o.Stderr)
		defer f1()
		defer f2()
	case safeSession:
		// One merged stream from the jail's pty, whose line ends arrive as \r\n (the host
		// terminal is in raw mode): those pass, every other control is shown. A key the
		// user types is echoed by that pty, so an erase shows as \x08 too.
		w := hostterm.NewSessionWriter(o.Stdout)
		defer w.Flush()
		o.Stdout = w
		// Nothing arrives apart on stderr in a session; were it to, it is defused too.
		var f func() error
		o.Stderr, f = safeFor(o.Stderr)
		defer f()
	}
	if stdin {
		o.Stdin = cmd.InOrStdin()
	}
	code, err := c.Exec(ctx(cmd), container, o)
	if err != nil {
		return exitcode.New(1, err)
	}
	if code != 0 {
		return exitcode.New(code, nil)
	}
	return nil
}

// execCapture runs argv without a terminal and returns its stdout; a non-zero exit is an
// error carrying its stderr.
func execCapture(cmd *cobra.Command, c execer, container string, argv []string) ([]byte, error) {
	var out, errb bytes.Buffer
	code, err := c.Exec(ctx(cmd), container, containers.ExecOptions{Argv: argv, Stdout: &out, Stderr: &errb})
	if err != nil {
		return nil, err
	}
	if code != 0 {
		// Quoted: the message ends up on the host's terminal.
		return nil, fmt.Errorf("%s exited %d: %q", strings.Join(argv, " "), code, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}
