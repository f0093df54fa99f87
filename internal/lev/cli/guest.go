package cli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/guestside"
)

// guestOptions is `lev __guest MODE`.
type guestOptions struct {
	Mode string
}

// newGuestCmd is lever's guest-side helpers, served by lev because lev is the binary lever
// has for the guest's OS and architecture: lever runs `lev __guest probe` (acceptance),
// `lev __guest enrol` and `lev __guest images` and `lev __guest mounts` (bring-up) as root in the guest with the
// request on stdin.
func newGuestCmd() *cobra.Command {
	opts := &guestOptions{}
	return &cobra.Command{
		Use:    guestside.Command + " " + guestside.ModeProbe + "|" + guestside.ModeEnrol + "|" + guestside.ModeImages + "|" + guestside.ModeMounts,
		Short:  "lever's guest-side helpers (lever runs them in the guest; not for people)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Mode = args[0]
			return runGuest(opts, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}

func runGuest(opts *guestOptions, stdin io.Reader, stdout io.Writer) error {
	return guestside.Serve(opts.Mode, stdin, stdout)
}
