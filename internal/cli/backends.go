package cli

import "github.com/spf13/cobra"

// Stubs until built: each says so plainly when run.

func newBackendsCmd() *cobra.Command {
	return &cobra.Command{Use: "backends", Short: "Show the containment matrix of every backend (not built yet)", Args: cobra.NoArgs, RunE: notBuilt("lever backends")}
}
