package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	_ "github.com/lever-jail/lever/internal/backend/all" // registers every backend
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/hosttrust"
)

// lifecycleOptions are what stop and destroy take.
type lifecycleOptions struct {
	config  string
	json    bool
	verbose bool
}

// lifecycleCmd binds c's -c and --json to a fresh lifecycleOptions and runs act on
// the instance's identity and backend.
func lifecycleCmd(c *cobra.Command, act func(context.Context, *config.Config, backend.Backend) (bringup.Lifecycle, error)) *cobra.Command {
	o := &lifecycleOptions{}
	c.Args = cobra.NoArgs
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		return o.run(cmd, act)
	}
	addConfigFlag(c, &o.config)
	c.Flags().BoolVar(&o.json, "json", false, "print the result as JSON")
	c.Flags().BoolVar(&o.verbose, "verbose", false, "list every path removed (destroy; --json always lists them)")
	return c
}

func (o *lifecycleOptions) run(cmd *cobra.Command, act func(context.Context, *config.Config, backend.Backend) (bringup.Lifecycle, error)) error {
	cfg, b, err := teardownTarget(cmd, o.config)
	if err != nil {
		return err
	}
	out, err := act(cmd.Context(), cfg, b)
	if err != nil {
		return err
	}
	return report(cmd.OutOrStdout(), o.json, o.verbose, out)
}

func newStopCmd() *cobra.Command {
	return lifecycleCmd(&cobra.Command{
		Use:   "stop",
		Short: "Power the guest off, keeping its disk, and stop the instance's broker",
		Long: `Power the jail's guest off and keep its disk: the next lever up (or egress apply)
resumes the same guest and verifies its firewall again. The instance's host broker is
stopped too; host state (CA, tickets, audit log) is kept.`,
	}, bringup.Stop)
}

func newDestroyCmd() *cobra.Command {
	return lifecycleCmd(&cobra.Command{
		Use:   "destroy",
		Short: "Remove the guest and every host-side file lever made for it",
		Long: `Stop the instance's broker, delete the guest and its disk, and remove the instance's
host state directory (CA and keys, tickets, broker state and audit log, backend files),
saying how many entries it held (--verbose lists them, --json always does). The project tree is never touched. Running it again on a
destroyed instance succeeds and removes nothing.`,
	}, destroy)
}

// destroy is bringup.Destroy, then the removal of lever's copy of a lever.yaml in the
// tree: with nothing brought up, the next lever up starts from the file as it is.
func destroy(ctx context.Context, cfg *config.Config, b backend.Backend) (bringup.Lifecycle, error) {
	out, err := bringup.Destroy(ctx, cfg, b)
	if err != nil {
		return out, err
	}
	if real, ok := inTreeConfig(cfg); ok {
		pin := hosttrust.ConfigPin(config.StateRoot(), real)
		switch err := os.Remove(pin); {
		case err == nil:
			out.AcceptedConfig = pin
		case !errors.Is(err, fs.ErrNotExist):
			return out, fmt.Errorf("removing lever's copy of %s: %w", real, err)
		}
	}
	return out, nil
}

// newDownCmd is destroy under its old name, kept as a deprecated alias (README's command
// list): exactly destroy's behaviour, with one line on stderr naming the replacement
// (stderr, so `--json` output stays clean for the scripts that still call it).
func newDownCmd() *cobra.Command {
	c := newDestroyCmd()
	c.Use = "down"
	c.Short = "Deprecated alias of lever destroy"
	c.Hidden = true
	run := c.RunE
	c.RunE = func(cmd *cobra.Command, args []string) error {
		fmt.Fprintln(cmd.ErrOrStderr(), "lever down is deprecated: it is lever destroy (the guest, its disk and lever's host-side files are removed); use lever destroy")
		return run(cmd, args)
	}
	return c
}

// teardownTarget loads only the instance's identity (config.LoadIdentity), so that a jail
// whose tree or key file has gone can still be stopped and destroyed.
func teardownTarget(cmd *cobra.Command, configPath string) (*config.Config, backend.Backend, error) {
	cfg, err := loadIdentity(cmd, configPath)
	if err != nil {
		return nil, nil, err
	}
	b, err := backend.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, b, nil
}

func report(w io.Writer, asJSON, verbose bool, out bringup.Lifecycle) error {
	if asJSON {
		return writeJSON(w, out)
	}
	out.WriteText(w, verbose)
	return nil
}
