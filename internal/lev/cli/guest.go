package cli

import (
	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/guestside"
)

// newGuestCmd is lever's guest-side helpers, served by lev because lev is the binary lever
// has for the guest's OS and architecture: lever runs `lev __guest probe` (acceptance) and
// `lev __guest enrol` (bring-up) as root in the guest with the request on stdin.
func newGuestCmd() *cobra.Command {
	return &cobra.Command{
		Use:    guestside.Command + " " + guestside.ModeProbe + "|" + guestside.ModeEnrol,
		Short:  "lever's guest-side helpers (lever runs them in the guest; not for people)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := guestside.Serve(args[0], cmd.InOrStdin(), cmd.OutOrStdout()); err != nil {
				return err
			}
			return nil
		},
	}
}
