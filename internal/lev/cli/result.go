package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// resultOptions is `lev result RUN`.
type resultOptions struct {
	Run  string
	JSON bool
}

func newResultCmd() *cobra.Command {
	opts := &resultOptions{}
	cmd := &cobra.Command{
		Use:   "result RUN",
		Short: "Print a run's result (exit 1 when the run did not complete)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Run = args[0]
			return runResult(cmdContext(cmd), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print {id, status, output, error} as JSON")
	return cmd
}

func runResult(ctx context.Context, opts *resultOptions, stdout, stderr io.Writer) error {
	id := opts.Run
	c, err := daemonClient(ctx, stderr)
	if err != nil {
		return err
	}
	res, err := c.Result(ctx, id)
	var ae *daemon.APIError
	if err != nil && !(errors.As(err, &ae) && ae.Code == 409) {
		return runErr(id, err)
	}
	if err != nil {
		// Not completed: say what it is instead.
		rec, gerr := c.Get(ctx, id)
		if gerr != nil {
			return runErr(id, gerr)
		}
		res = &daemon.Result{ID: rec.ID, Status: rec.Status, Error: rec.Error, Label: rec.Label}
		if res.Error == "" {
			res.Error = "run is " + string(rec.Status) + "; no result yet"
		}
	}
	if opts.JSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", hostterm.EscapeJSON(b))
	} else if res.Status == runner.StatusCompleted {
		// The model's output as text: neutralised on a terminal, unchanged for a script.
		writeResult(stdout, res.Output)
	}
	if res.Status != runner.StatusCompleted {
		return exitcode.New(1, fmt.Errorf("run %s is %s: %s", res.ID, res.Status, res.Error))
	}
	return nil
}
