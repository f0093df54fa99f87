package cli

import (
	"context"
	"errors"
	"io"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/events"
)

// logsOptions is `lev logs RUN`.
type logsOptions struct {
	Run          string
	Follow, JSON bool
}

func newLogsCmd() *cobra.Command {
	opts := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs RUN",
		Short: "Print a run's events, one line each (--follow: stream them until the run ends)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Run = args[0]
			return runLogs(cmdContext(cmd), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "stream the events until the run ends")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print each event as a JSON line")
	return cmd
}

func runLogs(ctx context.Context, opts *logsOptions, stdout, stderr io.Writer) error {
	id := opts.Run
	c, err := daemonClient(ctx, stderr)
	if err != nil {
		return err
	}
	rec, err := c.Get(ctx, id)
	if err != nil {
		return runErr(id, err)
	}
	// The same read-path warning lev run and lev resume print: a run refused for a
	// missing grant says what to add where its log is read.
	warnUngranted(stderr, rec)
	pr := &eventPrinter{w: stdout, asJSON: opts.JSON}
	print := func(ev *events.Event) error { return pr.print(ev) }
	// A run resumed after a refusal has one leg per start, each ending in run_end:
	// read leg after leg until the file has no more.
	var after int64
	for {
		last := after
		if opts.Follow {
			after, err = c.Events(ctx, id, after, print)
		} else {
			after, err = c.EventsSoFar(ctx, id, after, print)
		}
		if errors.Is(err, daemon.ErrStreamEnded) || (err == nil && after == last) {
			return nil
		}
		if err != nil {
			return runErr(id, err)
		}
	}
}
