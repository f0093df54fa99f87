// Package cli holds lever's cobra commands, one command (or one family of subcommands) per
// file, each in the same shape: an options struct holding its flags and arguments, a
// constructor (newXCmd) that binds them, and a run method that loads the config and hands
// over to the package that does the work (bringup, guest, brokerctl, backend).
//
// It owns the command line: flag and argument parsing, which config a command works on,
// the output format (text or --json) and the exit status. It must not hold domain logic:
// no firewall planning, no ticket or path policy, no bring-up decisions; those live in
// their packages, where the other callers and the tests reach them too. A refusal is a
// plain error (exit 2); only another status is wrapped, with internal/exitcode.
package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/version"
)

// NewRoot builds the whole command tree.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "lever",
		Short: "Jail AI coding agents in a VM that sees only the project tree, behind a proven egress firewall",
		Long: `lever provisions an isolated guest (OrbStack or Lima) that mounts only the project tree,
installs and verifies the LEVER_EGRESS firewall inside it rule for rule, runs the mTLS broker
on the host alias so API keys stay on the host, and starts the lev agent runtime inside the
guest under rootless podman.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newVersionCmd(),
		newApplyCmd(),
		newUpCmd(),
		newStopCmd(),
		newDestroyCmd(),
		newDownCmd(),
		newStatusCmd(),
		newAcceptanceCmd(),
		newBackendsCmd(),
		newEgressCmd(),
		newBrokerCmd(),
		newInitCmd(),
		newRunCmd(),
		newPsCmd(),
		newLogsCmd(),
		newResultCmd(),
		newResumeCmd(),
		newShellCmd(),
		newDoctorCmd(),
		newDashboardCmd(),
	)
	guardConfigArgs(root)
	root.PersistentFlags().Bool(acceptConfigFlag, false, "take a lever.yaml in the tree that changed since the jail was last brought up as yours (the agents write the tree; see docs/config.md, tree)")
	return root
}

// Main runs lever with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(withRawArgs(args))
	if msg := exitcode.Message(err); msg != "" {
		// An error can quote the guest or the jail (a script's stderr, a path an agent
		// named): on a terminal it is neutralised like everything else from there.
		if hostterm.IsTerminal(stderr) {
			msg = hostterm.Escape(msg)
		}
		fmt.Fprintf(stderr, "lever: %s\n", msg)
	}
	return exitcode.Of(err)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print lever's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "lever %s\n", version.Version)
			return err
		},
	}
}
