package bringup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/guest"
)

// brokerGrace is how long the broker gets to exit on SIGTERM before SIGKILL.
const brokerGrace = 10 * time.Second

// GuestAction is what stop or destroy did to the guest (its JSON is "guest_action").
type GuestAction string

const (
	GuestStopped   GuestAction = "stopped"   // lever stop: powered off, disk kept
	GuestDestroyed GuestAction = "destroyed" // lever destroy: deleted with its disk
)

// Lifecycle is what lever stop and destroy report.
type Lifecycle struct {
	Instance    string      `json:"instance"`
	Backend     string      `json:"backend"`
	Guest       string      `json:"guest"`
	GuestAction GuestAction `json:"guest_action"`
	// BrokerPID is the broker process lever ended (0: none was running).
	BrokerPID int `json:"broker_pid,omitempty"`
	// StateDir is the instance's host state directory; destroy removes it.
	StateDir string `json:"state_dir,omitempty"`
	// StateRemoved says destroy found and removed StateDir.
	StateRemoved bool `json:"state_removed,omitempty"`
	// Removed lists every file and directory destroy removed from StateDir, relative to it.
	Removed []string `json:"removed,omitempty"`
	// AcceptedConfig is lever's copy of a lever.yaml in the tree (hosttrust.ConfigPin)
	// that destroy removed: nothing is brought up any more.
	AcceptedConfig string `json:"accepted_config_removed,omitempty"`
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

// Stop powers the guest off (disk kept) and stops the broker. It needs only the
// instance's identity and backend (a jail whose tree or key file has gone still stops).
func Stop(ctx context.Context, cfg *config.Config, b backend.Backend) (Lifecycle, error) {
	out := Lifecycle{Instance: cfg.Name, Backend: b.Name(), Guest: cfg.MachineName(), GuestAction: GuestStopped}
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

// Destroy ends the broker, deletes the guest, then removes the state directory. The
// guest goes first: if deleting it fails, the state stays, so a second destroy can finish
// the job with everything it needs.
func Destroy(ctx context.Context, cfg *config.Config, b backend.Backend) (Lifecycle, error) {
	out := Lifecycle{Instance: cfg.Name, Backend: b.Name(), Guest: cfg.MachineName(), GuestAction: GuestDestroyed, StateDir: cfg.StateDir()}
	pid, err := stopBroker(ctx, cfg.StateDir())
	if err != nil {
		return out, err
	}
	out.BrokerPID = pid
	// On the netns substrate the guest shares the host's filesystem and users: the run
	// user, its rootless podman state and runtime dir are host objects to remove first.
	if err := TeardownInPlace(ctx, b); err != nil {
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
		if real, err := filepath.EvalSymlinks(dir); err == nil && fspath.Within(real, cfg.TreePath) {
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

// WriteText prints the result for people. A destroy names the state directory and how
// many entries it held; verbose lists them (thousands, with podman's storage in a netns
// jail's state: a summary is what a person reads, --json or --verbose what a script does).
func (out Lifecycle) WriteText(w io.Writer, verbose bool) {
	fmt.Fprintf(w, "%s guest %s (%s)\n", out.GuestAction, out.Guest, out.Backend)
	if out.BrokerPID != 0 {
		fmt.Fprintf(w, "stopped broker (pid %d)\n", out.BrokerPID)
	} else {
		fmt.Fprintln(w, "broker was not running")
	}
	if out.GuestAction == GuestDestroyed {
		if !out.StateRemoved {
			fmt.Fprintf(w, "no host state to remove (%s did not exist)\n", out.StateDir)
		} else {
			if !verbose {
				fmt.Fprintf(w, "removed %s (%d entries; --verbose lists them)\n", out.StateDir, len(out.Removed))
			} else {
				fmt.Fprintf(w, "removed %s (%d entries):\n", out.StateDir, len(out.Removed))
				for _, r := range out.Removed {
					fmt.Fprintf(w, "  %s\n", r)
				}
			}
		}
		if out.AcceptedConfig != "" {
			fmt.Fprintf(w, "removed lever's copy of the lever.yaml it brought up (%s)\n", out.AcceptedConfig)
		}
	}
}

// RunUserComment marks a run user lever created itself (its passwd comment field), so
// that teardown never deletes a host account lever merely adopted.
const RunUserComment = "lever run user"

// Teardown removes what lever made in a guest that shares the host (the netns
// substrate): the run user's containers and podman service, its storage, the user itself
// with its subordinate ids, and its runtime dir. On a VM the guest's deletion does this.
func (in *Instance) Teardown(ctx context.Context) error {
	if !in.InPlace {
		return nil
	}
	if skip, err := runUserElsewhere(in.b); skip || err != nil {
		return err
	}
	return teardownRunUser(ctx, in.Runner, in.RunUser, namespace(in.b))
}

// runUserElsewhere says the run user belongs to another jail (RunUserClaimer): its
// account, containers and podman state are that jail's, and this jail's teardown leaves
// them alone.
func runUserElsewhere(b backend.Backend) (bool, error) {
	c, ok := b.(RunUserClaimer)
	if !ok {
		return false, nil
	}
	owns, _, err := c.OwnsRunUser()
	if err != nil {
		return false, err
	}
	return !owns, nil
}

// TeardownInPlace is Teardown for `lever destroy`, which must work without a lev binary
// or a loadable tree: it needs only the backend. Backends whose guest has its own
// filesystem have nothing to remove here.
func TeardownInPlace(ctx context.Context, b backend.Backend) error {
	if h, ok := b.(HostSharer); !ok || !h.SharesHostFilesystem() {
		return nil
	}
	user := "lever"
	if n, ok := b.(RunUserNamer); ok && n.RunUser() != "" {
		user = n.RunUser()
	}
	if skip, err := runUserElsewhere(b); skip || err != nil {
		return err
	}
	return teardownRunUser(ctx, b.Runner(), user, namespace(b))
}

func teardownRunUser(ctx context.Context, r guest.Runner, user, ns string) error {
	ent, err := exec.CommandContext(ctx, "getent", "passwd", user).Output()
	if err != nil {
		return nil // no run user: nothing to remove
	}
	fields := strings.Split(strings.TrimSpace(string(ent)), ":")
	if len(fields) < 5 || fields[4] != RunUserComment {
		// Not made by lever (provision.sh sets the comment): leave the account and its
		// podman state alone rather than wipe somebody's user.
		return fmt.Errorf("run user %s was not created by lever (passwd comment %q); leaving it and its containers in place", user, fieldOr(fields, 4))
	}
	uid, _ := strconv.Atoi(fields[2])
	if ns != "" {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			containers.StopService(ctx, r, uid)
		}
	}
	// podman's storage holds files owned by subordinate ids; podman itself removes them.
	exec.CommandContext(ctx, "runuser", "-u", user, "--", "env", "XDG_RUNTIME_DIR=/run/user/"+strconv.Itoa(uid), "podman", "system", "reset", "--force").Run()
	// SIGKILL is delivered at once but a process takes a moment to go (conmon's cleanup
	// podman, a many-threaded service): userdel refuses while one is left ("currently
	// used by process N"), so wait until pgrep finds none, killing again, for up to 10 s.
	for i := 0; i < 100; i++ {
		exec.CommandContext(ctx, "pkill", "-KILL", "-u", user).Run()
		if exec.CommandContext(ctx, "pgrep", "-u", user).Run() != nil {
			break // exit 1: no process left
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := exec.CommandContext(ctx, "userdel", "--remove", user).CombinedOutput(); err != nil {
		return fmt.Errorf("removing run user %s: %v: %s", user, err, out)
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		data, err := os.ReadFile(f)
		if err != nil || !strings.Contains("\n"+string(data), "\n"+user+":") {
			continue // userdel removed it (a rewrite would race other writers)
		}
		var keep []string
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" && !strings.HasPrefix(l, user+":") {
				keep = append(keep, l+"\n")
			}
		}
		if err := os.WriteFile(f, []byte(strings.Join(keep, "")), 0o644); err != nil {
			return fmt.Errorf("removing %s's range from %s: %w", user, f, err)
		}
	}
	if err := os.RemoveAll("/run/user/" + strconv.Itoa(uid)); err != nil {
		return fmt.Errorf("removing run user's runtime dir: %w", err)
	}
	return nil
}

func fieldOr(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
}

// namespace is the guest's network namespace on the host ("" when it is not one).
func namespace(b backend.Backend) string {
	if n, ok := b.(Namespacer); ok {
		return n.Namespace()
	}
	return ""
}
