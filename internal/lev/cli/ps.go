package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// psOptions is `lev ps`.
type psOptions struct {
	JSON bool
}

func newPsCmd() *cobra.Command {
	opts := &psOptions{}
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPs(cmdContext(cmd), opts, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the runs as a JSON array")
	return cmd
}

func runPs(ctx context.Context, opts *psOptions, stdout, stderr io.Writer) error {
	c, err := daemonClient(ctx, stderr)
	if err != nil {
		return err
	}
	recs, err := c.List(ctx)
	if err != nil {
		return err
	}
	if opts.JSON {
		// One object per run, the fields a script wants; the full record is
		// GET /api/agents/{id}.
		out := make([]psRow, 0, len(recs))
		for _, r := range recs {
			row := psRow{ID: r.ID, Agent: r.Agent, Status: r.Status, Stage: r.Stage, Workdir: r.Workdir, Created: r.Created, Updated: r.Updated, Error: r.Error, Label: r.Label, Usage: r.Usage}
			if r.Stage < len(r.Stages) {
				row.StageName = r.Stages[r.Stage].Name
			}
			row.Stages = len(r.Stages)
			row.ReadPaths = r.ReadPaths
			row.Parent, row.Depth = r.Parent, r.Depth
			out = append(out, row)
		}
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		// Names and errors are the runs' (a tree blueprint's, a model's): DEL and C1,
		// which JSON strings may hold raw, go out as \u escapes.
		fmt.Fprintf(stdout, "%s\n", hostterm.EscapeJSON(b))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tAGENT\tSTATUS\tSTAGE\tREAD PATHS\tCREATED\tWORKDIR")
	for _, r := range recs {
		stage := "-"
		if r.Stage < len(r.Stages) {
			stage = fmt.Sprintf("%d/%d %s", r.Stage+1, len(r.Stages), r.Stages[r.Stage].Name)
		}
		// One cell each, whatever a blueprint named its agent or stages: neutralised.
		cells := []string{r.ID, r.Agent, string(r.Status), stage, readPathCell(r.ReadPaths), r.Created.Format("2006-01-02 15:04:05"), r.Workdir}
		for i, c := range cells {
			cells[i] = hostterm.EscapeLine(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

type psRow struct {
	ID        string        `json:"id"`
	Agent     string        `json:"agent"`
	Status    runner.Status `json:"status"`
	Stage     int           `json:"stage"`
	StageName string        `json:"stage_name,omitempty"`
	Stages    int           `json:"stages"`
	Workdir   string        `json:"workdir"`
	Created   time.Time     `json:"created"`
	Updated   time.Time     `json:"updated"`
	Error     string        `json:"error,omitempty"`
	// Label is the run's taint label, which its error carries (gated before it was
	// recorded).
	Label string `json:"label,omitempty"`
	// ReadPaths are the blueprint's [read_paths] entries and whether each is granted, so a
	// missing grant shows in the list before anybody opens the run.
	ReadPaths []runner.ReadPathStatus `json:"read_paths,omitempty"`
	// Parent and Depth: a sub-agent's parent run and how deep it runs (spawn_agent).
	Parent string `json:"parent,omitempty"`
	Depth  int    `json:"depth,omitempty"`
	// Usage is the run's token counts (run.json's usage).
	Usage *provider.Usage `json:"usage,omitempty"`
}

// readPathCell is lev ps's READ PATHS column: "-" when the blueprint declares none, else
// how many of its entries are granted, with NOT GRANTED when any is not.
func readPathCell(sts []runner.ReadPathStatus) string {
	if len(sts) == 0 {
		return "-"
	}
	n := 0
	for _, s := range sts {
		if s.Granted {
			n++
		}
	}
	cell := fmt.Sprintf("%d/%d granted", n, len(sts))
	if n < len(sts) {
		cell += fmt.Sprintf(" (%d NOT GRANTED)", len(sts)-n)
	}
	return cell
}
