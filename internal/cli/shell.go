package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/containers"
)

type shellOptions struct {
	config string
	agent  string
	argv   []string
}

func newShellCmd() *cobra.Command {
	o := &shellOptions{}
	c := &cobra.Command{
		Use:   "shell [manager|WORKER] [-- CMD...]",
		Short: "A shell (or one command) in an agent's workbench container, with exactly its confinement",
		Long: `Start /bin/sh, or CMD, in the workbench container of the manager (the default) or of
worker WORKER: the container where that agent's tools run, with its confinement (its part
of the tree, no capabilities, read-only root, the jail's egress) and none of lev's state.
A terminal session when stdin is a terminal. The command's exit code is lever's.`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			before := len(args)
			if dash >= 0 {
				before = dash
			}
			if before > 1 {
				return usageErr("lever shell takes one agent (manager or a worker's name) before --, got %q", args[:before])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash < 0 {
				dash = len(args)
			}
			if dash == 1 {
				o.agent = args[0]
			}
			o.argv = args[dash:]
			return o.exec(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	return c
}

// command is what runs in the workbench: CMD, or an interactive shell.
func (o *shellOptions) command() []string {
	if len(o.argv) > 0 {
		return o.argv
	}
	return []string{"/bin/sh"}
}

func (o *shellOptions) exec(cmd *cobra.Command) error {
	cfg, err := loadConfig(cmd, o.config)
	if err != nil {
		return err
	}
	agent, err := agentOf(cfg, o.agent)
	if err != nil {
		return err
	}
	a, err := attachJail(cmd, cfg)
	if err != nil {
		return err
	}
	bench := levContainer(cfg, agent) + benchSuffix
	st, err := a.c.Inspect(bench)
	if err != nil {
		return err
	}
	if st == nil || !st.Running {
		why := bench + " missing"
		if st != nil {
			why = fmt.Sprintf("%s %s", bench, st.Status)
		}
		return &bringup.NotUpError{Instance: cfg.Name, Config: cfg.Path, Why: why}
	}
	// stdin always goes to the command (`lever shell -- sh -s < script`); a terminal
	// at both ends makes it an interactive session, the one raw stream lever passes.
	//
	// The session runs as the workbench's user, as the exec channel's server does: through
	// lev bench shell, in namespaces of its own where the channel's directory is covered
	// and the server out of reach, as lev's own commands run (else it could replace the
	// socket and answer lev's tool calls).
	argv := append([]string{"/lev", "bench", "shell", "--hide", containers.BenchMount, "--"}, o.command()...)
	return execPass(cmd, a.c, bench, argv, sessionIf(cmd, true, rawSession), true)
}
