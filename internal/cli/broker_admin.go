package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/cap/ca"
)

// The broker's admin commands: revoke and rotate talk to the running broker's loopback
// admin listener; ticket works on the state dir's ticket store, broker or not.

func brokerAdmin(cmd *cobra.Command, configPath string) (*brokerctl.Admin, error) {
	cfg, err := loadConfig(cmd, configPath)
	if err != nil {
		return nil, err
	}
	return brokerctl.AdminFor(cfg.StateDir())
}

type brokerRevokeOptions struct {
	config, serial, agent string
}

func newBrokerRevokeCmd() *cobra.Command {
	o := &brokerRevokeOptions{}
	c := &cobra.Command{
		Use:   "revoke (--serial HEX | --agent NAME)",
		Short: "Revoke one client certificate, or every certificate of an agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().StringVar(&o.serial, "serial", "", "certificate serial (hex, as in the audit log)")
	c.Flags().StringVar(&o.agent, "agent", "", "agent name (certificate CN)")
	return c
}

func (o *brokerRevokeOptions) run(cmd *cobra.Command) error {
	if (o.serial == "") == (o.agent == "") {
		return fmt.Errorf("give exactly one of --serial or --agent")
	}
	adm, err := brokerAdmin(cmd, o.config)
	if err != nil {
		return err
	}
	r, err := adm.Revoke(cmd.Context(), brokerctl.RevokeRequest{Serial: o.serial, Agent: o.agent})
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "revoked %d certificate(s) of %s: %v\n", len(r.Revoked), r.Agent, r.Revoked)
	return nil
}

type brokerRotateOptions struct {
	config string
}

func newBrokerRotateCmd() *cobra.Command {
	o := &brokerRotateOptions{}
	c := &cobra.Command{
		Use:   "rotate",
		Short: "Re-issue the broker's server certificate now (the listener stays up)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	return c
}

func (o *brokerRotateOptions) run(cmd *cobra.Command) error {
	adm, err := brokerAdmin(cmd, o.config)
	if err != nil {
		return err
	}
	st, err := adm.Rotate(cmd.Context())
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "server certificate %s valid until %s\n", st.ServerCertSerial, st.ServerCertNotAfter.Format(time.RFC3339))
	return nil
}

type brokerTicketOptions struct {
	config, agent, role, out string
	ttl                      time.Duration
}

func newBrokerTicketCmd() *cobra.Command {
	o := &brokerTicketOptions{}
	c := &cobra.Command{
		Use:   "ticket --agent NAME",
		Short: "Issue a single-use enrolment ticket for one agent",
		Long: `Issue a single-use enrolment ticket bound to one agent. Bring-up delivers it to that
worker only, read-only at /run/lever from a tmpfs, never through the project tree.
Without --out the ticket is printed on stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	addConfigFlag(c, &o.config)
	c.Flags().StringVar(&o.agent, "agent", "", "agent name the ticket is bound to")
	c.Flags().StringVar(&o.role, "role", ca.RoleWorker, "manager or worker")
	c.Flags().DurationVar(&o.ttl, "ttl", 15*time.Minute, "how long the ticket can be redeemed")
	c.Flags().StringVar(&o.out, "out", "", "write the ticket to this new file (mode 0600) instead of stdout")
	return c
}

func (o *brokerTicketOptions) run(cmd *cobra.Command) error {
	cfg, err := loadConfig(cmd, o.config)
	if err != nil {
		return err
	}
	if o.out != "" {
		// Refused before a ticket is issued, so a refusal leaves nothing redeemable behind.
		if _, err := brokerctl.CheckTicketOut(cfg, o.out); err != nil {
			return err
		}
	}
	tok, err := brokerctl.IssueTicket(cfg.StateDir(), o.agent, o.role, o.ttl)
	if err != nil {
		return err
	}
	if o.out == "" {
		fmt.Fprintln(cmd.OutOrStdout(), tok)
		return nil
	}
	return brokerctl.WriteTicketFile(cfg, o.out, tok)
}
