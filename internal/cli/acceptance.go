package cli

import "github.com/spf13/cobra"

// Stubs until built: each says so plainly when run.

func newAcceptanceCmd() *cobra.Command {
	return &cobra.Command{Use: "acceptance [CONFIG]", Short: "Prove the jail's egress properties from inside it (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever acceptance")}
}
