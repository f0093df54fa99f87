package cli

import "github.com/spf13/cobra"

// Stubs until built: each says so plainly when run.

func newEgressCmd() *cobra.Command {
	c := &cobra.Command{Use: "egress", Short: "Plan, apply and verify the LEVER_EGRESS firewall"}
	c.AddCommand(
		&cobra.Command{Use: "plan [CONFIG]", Short: "Print the iptables-restore input per family (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever egress plan")},
		&cobra.Command{Use: "apply [CONFIG]", Short: "Bring the jail up if needed and apply egress (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever egress apply")},
		&cobra.Command{Use: "verify [CONFIG]", Short: "Compare live chains with the desired ruleset (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever egress verify")},
	)
	return c
}
