package cli

import "github.com/spf13/cobra"

// Stubs until built: each says so plainly when run.

func newApplyCmd() *cobra.Command {
	return &cobra.Command{Use: "apply [CONFIG]", Short: "Bring the jail up headless: backend, egress, provisioning, broker, lev (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever apply")}
}
func newUpCmd() *cobra.Command {
	return &cobra.Command{Use: "up [CONFIG]", Short: "apply, then attach to lev's status (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever up")}
}
func newStatusCmd() *cobra.Command {
	return &cobra.Command{Use: "status [CONFIG]", Short: "Show guest, egress, broker and container state (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever status")}
}
