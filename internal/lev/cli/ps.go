package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newPsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ps",
		Short: "List runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			c, err := connect(ctx, cfg, false, cmd.ErrOrStderr())
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			recs, err := c.List(ctx)
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tAGENT\tSTATUS\tSTAGE\tCREATED\tWORKDIR")
			for _, r := range recs {
				stage := "-"
				if r.Stage < len(r.Stages) {
					stage = fmt.Sprintf("%d/%d %s", r.Stage+1, len(r.Stages), r.Stages[r.Stage].Name)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Agent, r.Status, stage, r.Created.Format("2006-01-02 15:04:05"), r.Workdir)
			}
			return tw.Flush()
		},
	}
}
