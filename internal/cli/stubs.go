package cli

import "github.com/spf13/cobra"

// Commands the spec names that are not built yet. Each moves to its own file when built.

func newApplyCmd() *cobra.Command {
	return &cobra.Command{Use: "apply [CONFIG]", Short: "Bring the jail up headless: backend, egress, provisioning, broker, lev (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever apply")}
}

func newUpCmd() *cobra.Command {
	return &cobra.Command{Use: "up [CONFIG]", Short: "apply, then attach to lev's status (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever up")}
}

func newStopCmd() *cobra.Command {
	return &cobra.Command{Use: "stop [CONFIG]", Short: "Power the guest off, keeping its disk (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever stop")}
}

func newDestroyCmd() *cobra.Command {
	return &cobra.Command{Use: "destroy [CONFIG]", Short: "Remove the guest and every host-side file lever made for it (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever destroy")}
}

func newStatusCmd() *cobra.Command {
	return &cobra.Command{Use: "status [CONFIG]", Short: "Show guest, egress, broker and container state (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever status")}
}

func newAcceptanceCmd() *cobra.Command {
	return &cobra.Command{Use: "acceptance [CONFIG]", Short: "Prove the jail's egress properties from inside it (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever acceptance")}
}

func newBackendsCmd() *cobra.Command {
	return &cobra.Command{Use: "backends", Short: "Show the containment matrix of every backend (not built yet)", Args: cobra.NoArgs, RunE: notBuilt("lever backends")}
}

func newEgressCmd() *cobra.Command {
	c := &cobra.Command{Use: "egress", Short: "Plan, apply and verify the LEVER_EGRESS firewall"}
	c.AddCommand(
		&cobra.Command{Use: "plan [CONFIG]", Short: "Print the iptables-restore input per family (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever egress plan")},
		&cobra.Command{Use: "apply [CONFIG]", Short: "Bring the jail up if needed and apply egress (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever egress apply")},
		&cobra.Command{Use: "verify [CONFIG]", Short: "Compare live chains with the desired ruleset (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever egress verify")},
	)
	return c
}

func newBrokerCmd() *cobra.Command {
	c := &cobra.Command{Use: "broker", Short: "The mTLS broker on the host alias"}
	c.AddCommand(&cobra.Command{Use: "serve [CONFIG]", Short: "Run the broker in the foreground (not built yet)", Args: cobra.MaximumNArgs(1), RunE: notBuilt("lever broker serve")})
	return c
}
