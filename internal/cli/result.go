package cli

import (
	"github.com/spf13/cobra"
)

type resultOptions struct {
	config string
	run    string
	json   bool
}

func newResultCmd() *cobra.Command {
	o := &resultOptions{}
	c := &cobra.Command{
		Use:   "result RUN",
		Short: "Print a run's result",
		Long: `Print the result of run RUN (what its agent submitted) from the lev of the agent that
holds it. RUN is lev's run id, or AGENT/ID. Exit 1 when the run failed or was refused, 2
when it does not exist.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.run = args[0]
			return o.exec(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "print the run's record as JSON")
	return c
}

func (o *resultOptions) argv(id string) []string {
	a := []string{levPath, "result"}
	if o.json {
		a = append(a, "--json")
	}
	return append(a, "--", id)
}

func (o *resultOptions) exec(cmd *cobra.Command) error {
	cfg, a, agent, id, err := runTarget(cmd, o.config, o.run)
	if err != nil {
		return err
	}
	return execPass(cmd, a.c, levContainer(cfg, agent), o.argv(id), noSession, false)
}
