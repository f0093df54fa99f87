package cli

import (
	"github.com/spf13/cobra"
)

type logsOptions struct {
	config string
	run    string
	follow bool
	json   bool
}

func newLogsCmd() *cobra.Command {
	o := &logsOptions{}
	c := &cobra.Command{
		Use:   "logs RUN",
		Short: "Print a run's events (stages, model turns, tool calls and their decisions)",
		Long: `Print the events of run RUN, one line each, from the lev of the agent that holds it.
RUN is lev's run id as lever ps shows it, or AGENT/ID (manager/ID, WORKER/ID) to name the
agent. --follow keeps printing until the run ends. Exit 2 when the run does not exist.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.run = args[0]
			return o.exec(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVarP(&o.follow, "follow", "f", false, "keep printing events until the run ends")
	c.Flags().BoolVar(&o.json, "json", false, "print the events as JSON lines")
	return c
}

func (o *logsOptions) argv(id string) []string {
	a := []string{levPath, "logs"}
	if o.follow {
		a = append(a, "--follow")
	}
	if o.json {
		a = append(a, "--json")
	}
	return append(a, "--", id)
}

func (o *logsOptions) exec(cmd *cobra.Command) error {
	cfg, a, agent, id, err := runTarget(cmd, o.config, o.run)
	if err != nil {
		return err
	}
	// A terminal session lets ^C end a --follow inside the jail too.
	s := sessionIf(cmd, !o.json, safeSession)
	return execPass(cmd, a.c, levContainer(cfg, agent), o.argv(id), s, s != noSession)
}
