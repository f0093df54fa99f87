package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/backend"
	_ "github.com/lever-jail/lever/internal/backend/all" // registers every backend
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/config"
)

// brokerGrace is how long the broker gets to exit on SIGTERM before SIGKILL.
const brokerGrace = 10 * time.Second

// lifecycleOut is what stop and destroy report.
type lifecycleOut struct {
	Instance string `json:"instance"`
	Backend  string `json:"backend"`
	Guest    string `json:"guest"`
	// GuestAction: "stopped" (stop) or "destroyed" (destroy).
	GuestAction string `json:"guest_action"`
	// BrokerPID is the broker process lever ended (0: none was running).
	BrokerPID int `json:"broker_pid,omitempty"`
	// StateDir is the instance's host state directory; destroy removes it.
	StateDir string `json:"state_dir,omitempty"`
	// StateRemoved says destroy found and removed StateDir.
	StateRemoved bool `json:"state_removed,omitempty"`
	// Removed lists every file and directory destroy removed from StateDir, relative to it.
	Removed []string `json:"removed,omitempty"`
}

func newStopCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "stop [CONFIG]",
		Short: "Power the guest off, keeping its disk, and stop the instance's broker",
		Long: `Power the jail's guest off and keep its disk: the next lever up (or egress apply)
resumes the same guest and verifies its firewall again. The instance's host broker is
stopped too; host state (CA, tickets, audit log) is kept.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, b, err := teardownTarget(cmd, args)
			if err != nil {
				return err
			}
			out, err := stopInstance(cmd.Context(), cfg, b)
			if err != nil {
				return err
			}
			return report(cmd.OutOrStdout(), asJSON, out)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}

func newDestroyCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "destroy [CONFIG]",
		Short: "Remove the guest and every host-side file lever made for it",
		Long: `Stop the instance's broker, delete the guest and its disk, and remove the instance's
host state directory (CA and keys, tickets, broker state and audit log, backend files),
listing what was removed. The project tree is never touched. Running it again on a
destroyed instance succeeds and removes nothing.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, b, err := teardownTarget(cmd, args)
			if err != nil {
				return err
			}
			out, err := destroyInstance(cmd.Context(), cfg, b)
			if err != nil {
				return err
			}
			return report(cmd.OutOrStdout(), asJSON, out)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}

// newDownCmd is the spec's deprecated alias of destroy: exactly destroy's behaviour, with
// one line on stderr naming the replacement (stderr, so `--json` output stays clean for the
// scripts that still call it).
func newDownCmd() *cobra.Command {
	c := newDestroyCmd()
	c.Use = "down [CONFIG]"
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
func teardownTarget(cmd *cobra.Command, args []string) (*config.Config, backend.Backend, error) {
	cfg, err := config.LoadIdentity(configArgFor(cmd, args))
	if err != nil {
		return nil, nil, err
	}
	b, err := backend.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return cfg, b, nil
}

func stopBroker(ctx context.Context, stateDir string) (int, error) {
	st, err := brokerctl.Stop(ctx, stateDir, brokerGrace)
	if err != nil {
		return 0, fmt.Errorf("stopping the broker: %w", err)
	}
	if st.Running {
		return st.PID, nil
	}
	return 0, nil
}

// stopInstance powers the guest off (disk kept) and stops the broker.
func stopInstance(ctx context.Context, cfg *config.Config, b backend.Backend) (lifecycleOut, error) {
	out := lifecycleOut{Instance: cfg.Name, Backend: b.Name(), Guest: cfg.MachineName(), GuestAction: "stopped"}
	pid, err := stopBroker(ctx, cfg.StateDir())
	if err != nil {
		return out, err
	}
	out.BrokerPID = pid
	if err := b.Stop(ctx); err != nil {
		return out, fmt.Errorf("stopping guest %s (%s): %w", out.Guest, out.Backend, err)
	}
	return out, nil
}

// destroyInstance ends the broker, deletes the guest, then removes the state directory.
// The guest goes first: if deleting it fails, the state stays, so a second destroy can
// finish the job with everything it needs.
func destroyInstance(ctx context.Context, cfg *config.Config, b backend.Backend) (lifecycleOut, error) {
	out := lifecycleOut{Instance: cfg.Name, Backend: b.Name(), Guest: cfg.MachineName(), GuestAction: "destroyed", StateDir: cfg.StateDir()}
	pid, err := stopBroker(ctx, cfg.StateDir())
	if err != nil {
		return out, err
	}
	out.BrokerPID = pid
	// On the netns substrate the guest shares the host's filesystem and users: the run
	// user, its rootless podman state and runtime dir are host objects to remove first.
	if err := bringup.TeardownInPlace(ctx, b); err != nil {
		return out, fmt.Errorf("removing the run user lever made: %w; guest and host state are kept", err)
	}
	if err := b.Destroy(ctx); err != nil {
		return out, fmt.Errorf("destroying guest %s (%s): %w; host state in %s is kept", out.Guest, out.Backend, err, out.StateDir)
	}
	existed, removed, err := removeStateDir(cfg)
	out.StateRemoved, out.Removed = existed, removed
	if err != nil {
		return out, err
	}
	return out, nil
}

// removeStateDir removes the instance's state directory, returning what was in it. It
// refuses a state directory that is not exactly StateRoot/<name>, or that holds the tree:
// destroy must never reach the project.
func removeStateDir(cfg *config.Config) (bool, []string, error) {
	dir := cfg.StateDir()
	if cfg.Name == "" || filepath.Dir(dir) != filepath.Clean(config.StateRoot()) {
		return false, nil, fmt.Errorf("refusing to remove %s: not an instance state directory under %s", dir, config.StateRoot())
	}
	if cfg.TreePath != "" {
		if real, err := filepath.EvalSymlinks(dir); err == nil && inside(real, cfg.TreePath) {
			return false, nil, fmt.Errorf("refusing to remove %s: it contains the project tree %s", dir, cfg.TreePath)
		}
	}
	var removed []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			removed = append(removed, rel)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	sort.Strings(removed)
	if err := os.RemoveAll(dir); err != nil {
		return true, removed, fmt.Errorf("removing %s: %w", dir, err)
	}
	return true, removed, nil
}

// inside reports whether p is base or below it.
func inside(base, p string) bool {
	rel, err := filepath.Rel(base, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func report(w io.Writer, asJSON bool, out lifecycleOut) error {
	if asJSON {
		return writeJSON(w, out)
	}
	fmt.Fprintf(w, "%s guest %s (%s)\n", out.GuestAction, out.Guest, out.Backend)
	if out.BrokerPID != 0 {
		fmt.Fprintf(w, "stopped broker (pid %d)\n", out.BrokerPID)
	} else {
		fmt.Fprintln(w, "broker was not running")
	}
	if out.GuestAction == "destroyed" {
		if !out.StateRemoved {
			fmt.Fprintf(w, "no host state to remove (%s did not exist)\n", out.StateDir)
		} else {
			fmt.Fprintf(w, "removed %s (%d entries):\n", out.StateDir, len(out.Removed))
			for _, r := range out.Removed {
				fmt.Fprintf(w, "  %s\n", r)
			}
		}
	}
	return nil
}
