package cli

import "github.com/spf13/cobra"

// Stubs until built: each says so plainly when run.

func newBrokerCmd() *cobra.Command {
	c := &cobra.Command{Use: "broker", Short: "The mTLS broker on the host alias"}
	c.AddCommand(&cobra.Command{Use: "serve [CONFIG]", Short: "Run the broker in the foreground (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever broker serve")})
	return c
}
