package cli

import (
	"github.com/spf13/cobra"
)

type resumeOptions struct {
	config string
	run    string
}

func newResumeCmd() *cobra.Command {
	o := &resumeOptions{}
	c := &cobra.Command{
		Use:   "resume RUN",
		Short: "Resume a stopped or refused run, streaming it like lever run",
		Long: `Resume run RUN (lev's run id, or AGENT/ID) in the lev of the agent that holds it,
printing its progress live and putting its prompts to you when this terminal is
interactive. Exit codes as lever run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.run = args[0]
			return o.exec(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	return c
}

func (o *resumeOptions) argv(id string) []string {
	return []string{levPath, "resume", "--", id}
}

func (o *resumeOptions) exec(cmd *cobra.Command) error {
	cfg, a, agent, id, err := runTarget(cmd, o.config, o.run)
	if err != nil {
		return err
	}
	s := sessionIf(cmd, true, safeSession)
	return execPass(cmd, a.c, levContainer(cfg, agent), o.argv(id), s, s != noSession)
}
