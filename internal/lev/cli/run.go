package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/lev/runner"
)

func newRunCmd() *cobra.Command {
	var spec runner.Spec
	var detach bool
	cmd := &cobra.Command{
		Use:   "run <agent>",
		Short: "Spawn a run on the daemon (starting it if needed) and wait for its result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			spec.Agent = args[0]
			if strings.HasSuffix(spec.Agent, ".toml") || strings.ContainsRune(spec.Agent, '/') {
				// The daemon resolves names from its own directory, not ours.
				if spec.Agent, err = filepath.Abs(spec.Agent); err != nil {
					return err
				}
			}
			if spec.Workdir == "" {
				spec.Workdir, _ = os.Getwd()
			}
			if spec.Workdir, err = filepath.Abs(spec.Workdir); err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			c, err := connect(ctx, cfg, true, cmd.ErrOrStderr())
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			rec, err := c.Spawn(ctx, spec)
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("spawning %s: %w", spec.Agent, err)}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "lev: run %s of %s in %s\n", rec.ID, rec.Agent, rec.Workdir)
			if detach {
				fmt.Fprintln(cmd.OutOrStdout(), rec.ID)
				return nil
			}
			return waitAndReport(ctx, c, rec.ID, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&spec.Workdir, "workdir", "", "the run's workdir (default: the current directory)")
	cmd.Flags().BoolVar(&spec.Yolo, "yolo", false, "run unattended: every ask permission becomes allow (deny stays deny)")
	cmd.Flags().StringArrayVar(&spec.Allow, "allow", nil, "turn this tool's ask permission into allow (repeatable; never lifts deny)")
	cmd.Flags().StringVar(&spec.Input, "input", "", "the task, appended to the first stage's prompt")
	cmd.Flags().BoolVar(&detach, "detach", false, "print the run id and return without waiting")
	return cmd
}

type waiter interface {
	Wait(ctx context.Context, id string, every time.Duration) (*runner.Record, error)
}

func waitAndReport(ctx context.Context, c waiter, id string, stdout, stderr io.Writer) error {
	rec, err := c.Wait(ctx, id, 200*time.Millisecond)
	if err != nil {
		return &ExitError{Code: 2, Err: err}
	}
	switch rec.Status {
	case runner.StatusCompleted:
		fmt.Fprintln(stdout, string(rec.Result))
		return nil
	case runner.StatusRefused:
		return &ExitError{Code: 1, Err: fmt.Errorf("run %s refused: %s", rec.ID, rec.Error)}
	}
	return &ExitError{Code: 1, Err: fmt.Errorf("run %s %s: %s", rec.ID, rec.Status, rec.Error)}
}
