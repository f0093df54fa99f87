package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/exitcode"
)

type psOptions struct {
	config string
	json   bool
}

// psOut is lever ps --json.
type psOut struct {
	Instance string    `json:"instance"`
	Runs     []jailRun `json:"runs"`
}

func newPsCmd() *cobra.Command {
	o := &psOptions{}
	c := &cobra.Command{
		Use:   "ps",
		Short: "List the runs of the manager and every worker",
		Long: `List lev's runs in every agent of the jail (the manager and each worker), merged and
ordered by creation, with the agent that holds each run. Exit 1 when an agent's lev could
not be asked (the others are still listed), 2 when the jail is not up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "print the runs as JSON")
	return c
}

func (o *psOptions) run(cmd *cobra.Command) error {
	cfg, err := loadConfig(cmd, o.config)
	if err != nil {
		return err
	}
	a, err := attachJail(cmd, cfg)
	if err != nil {
		return err
	}
	out := psOut{Instance: cfg.Name, Runs: []jailRun{}}
	var failed []error
	for _, ag := range agentNames(cfg) {
		runs, err := listRuns(cmd, a, ag)
		if err != nil {
			failed = append(failed, err)
			continue
		}
		out.Runs = append(out.Runs, runs...)
	}
	sortRuns(out.Runs)
	if o.json {
		if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	} else {
		// The names come from blueprints (a tree's is anybody's): defused on a terminal.
		w, flush := safeFor(cmd.OutOrStdout())
		defer flush()
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AGENT\tRUN\tBLUEPRINT\tSTATUS\tSTAGE\tCREATED")
		for _, r := range out.Runs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Agent, r.info.ID, r.info.Agent, r.info.Status, r.info.stage(), r.info.Created.Local().Format("2006-01-02 15:04:05"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	ew, eflush := safeFor(cmd.ErrOrStderr()) // an error can quote the jail
	for _, e := range failed {
		fmt.Fprintf(ew, "lever: %v\n", e)
	}
	eflush()
	if len(failed) > 0 {
		return exitcode.New(1, nil)
	}
	return nil
}
