// Package cli holds lever's cobra commands. Each command lives in its own file and only
// parses flags, loads config and hands over to the package that does the work.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/version"
)

// ExitError carries a specific exit code out of a command (verify uses 1 for drift, 2 for
// errors).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

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
	)
	addConfigFlags(root)
	return root
}

// Main runs lever with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(stderr, "lever: %v\n", ee.Err)
		}
		return ee.Code
	}
	fmt.Fprintf(stderr, "lever: %v\n", err)
	return 2
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

// configArgFor is the config path of a command taking [CONFIG]: the positional argument,
// else its -c/--config, else ./lever.yaml.
func configArgFor(cmd *cobra.Command, args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	if f := cmd.Flags().Lookup("config"); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	return "lever.yaml"
}

// addConfigFlags gives every command that takes [CONFIG] a -c/--config too, so each
// command names its jail the same way (the host commands take -c; their positional
// arguments are an agent, a run or a worker).
func addConfigFlags(c *cobra.Command) {
	for _, sub := range c.Commands() {
		addConfigFlags(sub)
	}
	if strings.Contains(c.Use, "[CONFIG]") && c.Flags().Lookup("config") == nil {
		c.Flags().StringP("config", "c", "", "the jail's lever.yaml (or give it as the CONFIG argument; default ./lever.yaml)")
	}
}
