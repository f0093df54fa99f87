package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/events"
)

func newLogsCmd() *cobra.Command {
	var followFlag, asJSON bool
	cmd := &cobra.Command{
		Use:   "logs RUN",
		Short: "Print a run's events, one line each (--follow: stream them until the run ends)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			ctx, c, err := daemonClient(cmd)
			if err != nil {
				return err
			}
			if _, err := c.Get(ctx, id); err != nil {
				return runErr(id, err)
			}
			pr := &eventPrinter{w: cmd.OutOrStdout(), asJSON: asJSON}
			print := func(ev *events.Event) error { return pr.print(ev) }
			// A run resumed after a refusal has one leg per start, each ending in run_end:
			// read leg after leg until the file has no more.
			var after int64
			for {
				last := after
				if followFlag {
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
		},
	}
	cmd.Flags().BoolVarP(&followFlag, "follow", "f", false, "stream the events until the run ends")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each event as a JSON line")
	return cmd
}
