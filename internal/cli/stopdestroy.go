package cli

import "github.com/spf13/cobra"

// Stubs until built: each says so plainly when run.

func newStopCmd() *cobra.Command {
	return &cobra.Command{Use: "stop [CONFIG]", Short: "Power the guest off, keeping its disk (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever stop")}
}
func newDestroyCmd() *cobra.Command {
	return &cobra.Command{Use: "destroy [CONFIG]", Short: "Remove the guest and every host-side file lever made for it (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever destroy")}
}
