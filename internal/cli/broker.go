package cli

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/cap/ca"
	"github.com/lever-jail/lever/internal/cap/ticket"
	"github.com/lever-jail/lever/internal/config"
)

// brokerFlags override what OptionsFromConfig derives; they are forwarded from `start`
// to the detached `serve`.
type brokerFlags struct {
	listen, admin, authHeader string
	sanIPs, sanNames          []string
}

func (f *brokerFlags) add(c *cobra.Command) {
	c.Flags().StringVar(&f.listen, "listen", "", "jail listener host:port (default: 127.0.0.1:<jail_port>; on netns the alias IP)")
	c.Flags().StringVar(&f.admin, "admin", "", "admin listener host:port, loopback only (default: 127.0.0.1:<admin_port>)")
	c.Flags().StringVar(&f.authHeader, "auth-header", "", "how the API key is sent upstream: bearer or x-api-key (default: x-api-key for api.anthropic.com, else bearer)")
	c.Flags().StringSliceVar(&f.sanIPs, "san-ip", nil, "IP SAN for the server certificate (default: $LEVER_HOST_ALIAS_IP)")
	c.Flags().StringSliceVar(&f.sanNames, "san-name", nil, "DNS SAN for the server certificate (default: the backend's host alias name)")
}

func (f *brokerFlags) argv() []string {
	var a []string
	if f.listen != "" {
		a = append(a, "--listen", f.listen)
	}
	if f.admin != "" {
		a = append(a, "--admin", f.admin)
	}
	if f.authHeader != "" {
		a = append(a, "--auth-header", f.authHeader)
	}
	for _, ip := range f.sanIPs {
		a = append(a, "--san-ip", ip)
	}
	for _, n := range f.sanNames {
		a = append(a, "--san-name", n)
	}
	return a
}

func (f *brokerFlags) options(cfg *config.Config) (brokerctl.Options, error) {
	o, err := brokerctl.OptionsFromConfig(cfg, nil)
	if err != nil && f.listen == "" {
		return o, err
	}
	if f.listen != "" {
		o.Listen = f.listen
	}
	if f.admin != "" {
		o.AdminListen = f.admin
	}
	if f.authHeader != "" {
		o.AuthHeader = f.authHeader
	}
	if len(f.sanNames) > 0 {
		o.SANNames = f.sanNames
	}
	if len(f.sanIPs) > 0 {
		o.SANIPs = nil
		for _, s := range f.sanIPs {
			ip := net.ParseIP(s)
			if ip == nil {
				return o, fmt.Errorf("--san-ip: %q is not an IP address", s)
			}
			o.SANIPs = append(o.SANIPs, ip)
		}
	}
	return o, nil
}

func newBrokerCmd() *cobra.Command {
	c := &cobra.Command{Use: "broker", Short: "The mTLS broker on the host alias (keeps the API key on the host)"}
	c.AddCommand(newBrokerServeCmd(), newBrokerStartCmd(), newBrokerStopCmd(), newBrokerStatusCmd(),
		newBrokerRevokeCmd(), newBrokerRotateCmd(), newBrokerTicketCmd())
	return c
}

func newBrokerServeCmd() *cobra.Command {
	var f brokerFlags
	c := &cobra.Command{
		Use:   "serve [CONFIG]",
		Short: "Run the broker in the foreground until SIGINT/SIGTERM",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(configArgFor(cmd, args))
			if err != nil {
				return err
			}
			o, err := f.options(cfg)
			if err != nil {
				return err
			}
			errw := cmd.ErrOrStderr()
			o.Logf = func(format string, a ...any) {
				fmt.Fprintf(errw, "%s %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return brokerctl.Serve(ctx, o)
		},
	}
	f.add(c)
	return c
}

func newBrokerStartCmd() *cobra.Command {
	var f brokerFlags
	c := &cobra.Command{
		Use:   "start [CONFIG]",
		Short: "Start the broker as a detached host process (no-op when it already runs)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(configArgFor(cmd, args))
			if err != nil {
				return err
			}
			if _, err := f.options(cfg); err != nil {
				return err
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			argv := append([]string{exe, "broker", "serve", cfg.Path}, f.argv()...)
			st, err := brokerctl.Start(cmd.Context(), cfg.StateDir(), brokerctl.StartOptions{Argv: argv, Env: os.Environ()})
			if err != nil {
				return err
			}
			return printBrokerStatus(cmd, st, cfg.StateDir())
		},
	}
	f.add(c)
	return c
}

func newBrokerStopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop [CONFIG]",
		Short: "Stop the detached broker (a stale pid file is removed, nothing signalled)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(configArgFor(cmd, args))
			if err != nil {
				return err
			}
			st, err := brokerctl.Stop(cmd.Context(), cfg.StateDir(), 10*time.Second)
			if err != nil {
				return err
			}
			switch {
			case st.Running:
				fmt.Fprintf(cmd.OutOrStdout(), "broker stopped (pid %d)\n", st.PID)
			case st.Stale:
				fmt.Fprintf(cmd.OutOrStdout(), "broker was not running; removed a stale pid file (%s)\n", st.StaleReason)
			default:
				fmt.Fprintln(cmd.OutOrStdout(), "broker was not running")
			}
			return nil
		},
	}
}

func newBrokerStatusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [CONFIG]",
		Short: "Show whether the broker runs, where it listens and when its certificate expires (exit 1 when not running)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(configArgFor(cmd, args))
			if err != nil {
				return err
			}
			st, err := brokerctl.Status(cfg.StateDir())
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), st); err != nil {
					return err
				}
			} else if err := printBrokerStatus(cmd, st, cfg.StateDir()); err != nil {
				return err
			}
			if !st.Running {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func printBrokerStatus(cmd *cobra.Command, st *brokerctl.BrokerStatus, stateDir string) error {
	w := cmd.OutOrStdout()
	switch {
	case st.Running && st.State != nil:
		s := st.State
		fmt.Fprintf(w, "broker running, pid %d\n  listen: %s\n  admin:  %s\n  SANs:   %v %v\n  server certificate %s valid until %s\n  CA sha256: %s\n  audit: %s\n",
			st.PID, s.Listen, s.Admin, s.SANNames, s.SANIPs, s.ServerCertSerial, s.ServerCertNotAfter.Format(time.RFC3339), s.CAFingerprint, brokerctl.AuditPath(stateDir))
	case st.Running:
		fmt.Fprintf(w, "broker running, pid %d (no state published yet)\n", st.PID)
	case st.Stale:
		fmt.Fprintf(w, "broker not running (stale pid file: %s)\n", st.StaleReason)
	default:
		fmt.Fprintln(w, "broker not running")
	}
	return nil
}

func brokerAdmin(cmd *cobra.Command, args []string) (*brokerctl.Admin, error) {
	cfg, err := config.Load(configArgFor(cmd, args))
	if err != nil {
		return nil, err
	}
	return brokerctl.AdminFor(cfg.StateDir())
}

func newBrokerRevokeCmd() *cobra.Command {
	var serial, agent string
	c := &cobra.Command{
		Use:   "revoke [CONFIG] (--serial HEX | --agent NAME)",
		Short: "Revoke one client certificate, or every certificate of an agent",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (serial == "") == (agent == "") {
				return fmt.Errorf("give exactly one of --serial or --agent")
			}
			adm, err := brokerAdmin(cmd, args)
			if err != nil {
				return err
			}
			r, err := adm.Revoke(cmd.Context(), brokerctl.RevokeRequest{Serial: serial, Agent: agent})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %d certificate(s) of %s: %v\n", len(r.Revoked), r.Agent, r.Revoked)
			return nil
		},
	}
	c.Flags().StringVar(&serial, "serial", "", "certificate serial (hex, as in the audit log)")
	c.Flags().StringVar(&agent, "agent", "", "agent name (certificate CN)")
	return c
}

func newBrokerRotateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate [CONFIG]",
		Short: "Re-issue the broker's server certificate now (the listener stays up)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			adm, err := brokerAdmin(cmd, args)
			if err != nil {
				return err
			}
			st, err := adm.Rotate(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "server certificate %s valid until %s\n", st.ServerCertSerial, st.ServerCertNotAfter.Format(time.RFC3339))
			return nil
		},
	}
}

func newBrokerTicketCmd() *cobra.Command {
	var agent, role, out string
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "ticket [CONFIG] --agent NAME",
		Short: "Issue a single-use enrolment ticket for one agent",
		Long: `Issue a single-use enrolment ticket bound to one agent. Bring-up delivers it to that
worker only, read-only at /run/lever from a tmpfs, never through the project tree.
Without --out the ticket is printed on stdout.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(configArgFor(cmd, args))
			if err != nil {
				return err
			}
			if out != "" {
				abs, err := filepath.Abs(out)
				if err != nil {
					return err
				}
				tree := cfg.Tree
				if !filepath.IsAbs(tree) {
					tree = filepath.Join(cfg.Dir, tree)
				}
				for _, d := range []string{cfg.Dir, tree} {
					if rel, err := filepath.Rel(d, abs); err == nil && filepath.IsLocal(rel) {
						return fmt.Errorf("--out %s is inside %s; a ticket must never be written into the project tree or next to the config", out, d)
					}
				}
			}
			// Tickets are files in the state dir, so this works with or without a running broker.
			st, err := ticketStore(cfg.StateDir())
			if err != nil {
				return err
			}
			tok, err := st.Issue(agent, role, ttl)
			if err != nil {
				return err
			}
			if out == "" {
				fmt.Fprintln(cmd.OutOrStdout(), tok)
				return nil
			}
			return ca.WritePrivateFileExcl(out, []byte(tok+"\n"))
		},
	}
	c.Flags().StringVar(&agent, "agent", "", "agent name the ticket is bound to")
	c.Flags().StringVar(&role, "role", ca.RoleWorker, "manager or worker")
	c.Flags().DurationVar(&ttl, "ttl", 15*time.Minute, "how long the ticket can be redeemed")
	c.Flags().StringVar(&out, "out", "", "write the ticket to this new file (mode 0600) instead of stdout")
	return c
}

func ticketStore(stateDir string) (*ticket.Store, error) {
	return ticket.Open(brokerctl.TicketDir(stateDir))
}
