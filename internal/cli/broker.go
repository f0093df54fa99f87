package cli

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/exitcode"
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

// brokerOptions are what the broker lifecycle commands take: the config, and for serve
// and start the listener overrides.
type brokerOptions struct {
	config string
	flags  brokerFlags
	json   bool
}

// cmd binds a lifecycle command's -c to o and runs run.
func (o *brokerOptions) cmd(c *cobra.Command, run func(*brokerOptions, *cobra.Command) error) *cobra.Command {
	c.Args = cobra.NoArgs
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		return run(o, cmd)
	}
	addConfigFlag(c, &o.config)
	return c
}

func newBrokerServeCmd() *cobra.Command {
	o := &brokerOptions{}
	c := o.cmd(&cobra.Command{Use: "serve", Short: "Run the broker in the foreground until SIGINT/SIGTERM"}, (*brokerOptions).serve)
	o.flags.add(c)
	return c
}

func (o *brokerOptions) serve(cmd *cobra.Command) error {
	cfg, err := loadConfig(cmd, o.config)
	if err != nil {
		return err
	}
	bo, err := o.flags.options(cfg)
	if err != nil {
		return err
	}
	errw := cmd.ErrOrStderr()
	bo.Logf = func(format string, a ...any) {
		fmt.Fprintf(errw, "%s %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return brokerctl.Serve(ctx, bo)
}

func newBrokerStartCmd() *cobra.Command {
	o := &brokerOptions{}
	c := o.cmd(&cobra.Command{Use: "start", Short: "Start the broker as a detached host process (no-op when it already runs)"}, (*brokerOptions).start)
	o.flags.add(c)
	return c
}

func (o *brokerOptions) start(cmd *cobra.Command) error {
	cfg, err := loadConfig(cmd, o.config)
	if err != nil {
		return err
	}
	if _, err := o.flags.options(cfg); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	argv := append([]string{exe, "broker", "serve", "-c", cfg.Path}, o.flags.argv()...)
	st, err := brokerctl.Start(cmd.Context(), cfg.StateDir(), brokerctl.StartOptions{Argv: argv, Env: os.Environ()})
	if err != nil {
		return err
	}
	return printBrokerStatus(cmd, st, cfg.StateDir())
}

func newBrokerStopCmd() *cobra.Command {
	o := &brokerOptions{}
	return o.cmd(&cobra.Command{Use: "stop", Short: "Stop the detached broker (a stale pid file is removed, nothing signalled)"}, (*brokerOptions).stop)
}

func (o *brokerOptions) stop(cmd *cobra.Command) error {
	cfg, err := loadConfig(cmd, o.config)
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
}

func newBrokerStatusCmd() *cobra.Command {
	o := &brokerOptions{}
	c := o.cmd(&cobra.Command{Use: "status", Short: "Show whether the broker runs, where it listens and when its certificate expires (exit 1 when not running)"}, (*brokerOptions).status)
	c.Flags().BoolVar(&o.json, "json", false, "print JSON")
	return c
}

func (o *brokerOptions) status(cmd *cobra.Command) error {
	cfg, err := loadConfig(cmd, o.config)
	if err != nil {
		return err
	}
	st, err := brokerctl.Status(cfg.StateDir())
	if err != nil {
		return err
	}
	if o.json {
		if err := writeJSON(cmd.OutOrStdout(), st); err != nil {
			return err
		}
	} else if err := printBrokerStatus(cmd, st, cfg.StateDir()); err != nil {
		return err
	}
	if !st.Running {
		return exitcode.New(1, nil)
	}
	return nil
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
