// Package cli holds lev's cobra commands, one file per command, in internal/cli's shape
// (gh's pkg/cmd): an options struct, a constructor that binds flags and arguments to it,
// and a run function, given the command's writers, that loads the config and hands over to
// the domain packages; so a command's logic reads without cobra in the way.
//
// It owns flags, output formats and exit statuses (internal/exitcode: a plain error exits
// 2, and only another status is wrapped). It must not hold domain logic (policy
// evaluation, run driving, fencing), and no cobra or flag code lives outside it.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/version"
)

// NewRoot builds lev's command tree.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "lev",
		Short: "lev runs AI agents from blueprints; every tool call passes permissions, the read-path fence, the taint gate and the sandbox",
		Long: `lev is the agent runtime. lev serve runs the daemon (HTTP API on loopback, bearer token
required); lev run spawns a run on it, starting it if needed. State lives in $LEV_HOME
(default ~/.leviath): config.toml, agents/, runs/.`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServeCmd(), newRunCmd(), newResumeCmd(), newPsCmd(), newLogsCmd(), newResultCmd(), newValidateCmd(), newPolicyCmd(), newBenchCmd(), newMCPCmd(), newGuestCmd(), newUpdateCmd(), newToolsCmd(), newAnswerCmd())
	return root
}

// Main runs lev with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == sandbox.KeepAliveArg {
		// PID 1 of a container sandbox (keepalive.go): nothing of lev's config or state,
		// only a wait for the lev that started it to die.
		return sandbox.KeepAliveMain()
	}
	// Pin lev's state paths once, before anything reads them or starts a daemon that
	// inherits them (a relative LEV_HOME would otherwise mean a different place, or
	// nothing protected, from another directory).
	if err := levconfig.AbsEnv(); err != nil {
		fmt.Fprintln(stderr, "lev:", err)
		return 2
	}
	root := NewRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if msg := exitcode.Message(err); msg != "" {
		// An error can carry a run's (the model's, a tool's, a server's words): it is
		// neutralised like the run's events, on a terminal or not (an error is no data a
		// script needs byte for byte, and a log it lands in is read on a terminal later).
		fmt.Fprintln(stderr, "lev:", hostterm.Escape(msg))
	}
	return exitcode.Of(err)
}

func loadConfig() (*levconfig.Config, error) {
	return levconfig.Load(levconfig.Path())
}

func agentsDir() string {
	if d := os.Getenv("LEV_AGENTS_DIR"); d != "" {
		return d
	}
	return filepath.Join(levconfig.Home(), "agents")
}

func newClient(cfg *levconfig.Config, token string) (*daemon.Client, error) {
	return daemon.NewClient(cfg.Daemon.Listen, token)
}

// cmdContext is cmd's context; cobra leaves it nil when a command runs outside Execute.
func cmdContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// daemonClient is the opening of every command that asks a running daemon (ps, logs,
// result): the config and a client for a daemon that must already be up (exit 2
// otherwise, naming where it was looked for).
func daemonClient(ctx context.Context, stderr io.Writer) (*daemon.Client, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	return connect(ctx, cfg, false, stderr)
}

// connect returns a client for a running daemon; with start, it starts one if none answers.
func connect(ctx context.Context, cfg *levconfig.Config, start bool, stderr io.Writer) (*daemon.Client, error) {
	var token string
	var err error
	if start {
		token, err = daemon.EnsureToken(cfg.TokenFile())
	} else {
		token, err = daemon.ReadToken(cfg.TokenFile())
	}
	if err != nil {
		return nil, err
	}
	c, err := newClient(cfg, token)
	if err != nil {
		return nil, err
	}
	if err := c.Health(ctx); err == nil {
		return c, nil
	} else if !start {
		return nil, fmt.Errorf("no lev daemon answers at %s (start one with lev serve): %w", cfg.Daemon.Listen, err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logFile := filepath.Join(levconfig.Home(), "daemon.log")
	fmt.Fprintf(stderr, "lev: starting the daemon on %s (log: %s)\n", cfg.Daemon.Listen, logFile)
	if err := daemon.StartDetached(ctx, c, exe, []string{"serve"}, logFile); err != nil {
		return nil, err
	}
	return c, nil
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func quoteList(xs []string) string { return strings.Join(xs, ", ") }
