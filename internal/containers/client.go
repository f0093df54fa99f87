package containers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/bindings"
	podcontainers "github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
)

// Client talks to the run user's rootless podman REST socket.
type Client struct {
	ctx context.Context
	URI string
	// imageWrites counts image loads and builds through this client (a warm bring-up
	// makes none; tests assert it).
	imageWrites atomic.Int64
}

// Connect opens the bindings connection (unix:///run/user/UID/podman/podman.sock, or an
// ssh:// URI for a VM) and pings the service.
func Connect(ctx context.Context, uri string) (*Client, error) {
	c, err := bindings.NewConnection(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("connecting to rootless podman at %s: %w", uri, err)
	}
	return &Client{ctx: c, URI: uri}, nil
}

// ImageExists reports whether the guest's podman holds ref.
func (c *Client) ImageExists(ref string) (bool, error) {
	ok, err := images.Exists(c.ctx, ref, nil)
	if err != nil {
		return false, fmt.Errorf("checking image %s: %w", ref, err)
	}
	return ok, nil
}

// LoadArchive streams a docker-archive or oci-archive into the guest's podman and returns
// the names it loaded.
func (c *Client) LoadArchive(archive []byte) ([]string, error) {
	c.imageWrites.Add(1)
	rep, err := images.Load(c.ctx, bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("loading image archive into rootless podman: %w", err)
	}
	return rep.Names, nil
}

// Change says what Ensure did to one container.
type Change string

const (
	Unchanged Change = "unchanged"
	Started   Change = "started"
	Created   Change = "created"
	Recreated Change = "recreated"
	// Restarted: it ran with its planned settings, but StartHooks.Restart found it must
	// start again (its mounts no longer the planned ones): replaced by a new one.
	Restarted Change = "restarted"
)

// Ensure makes the container exist with exactly these settings and run. A container whose
// spec-hash label matches is only started if stopped (so lever stop + up keeps it, and its
// create-time devices); one with another hash, or any container under fresh, is replaced.
func (c *Client) Ensure(ct Container, fresh bool) (Change, error) {
	return c.EnsureWith(ct, fresh, StartHooks{})
}

// StartHooks are a caller's checks around a container's start (never on the unchanged
// path). podman resolves bind-mount sources at every start, and the in-tree sources are
// writable by the agents, so bring-up checks them here.
type StartHooks struct {
	// Before, when set, runs right before the container is created or started.
	Before func(Container) error
	// Mounted, when set, runs once the runtime has set the container up (podman init: its
	// mounts made, its process waiting and having run nothing) with that process's pid
	// in the guest. An error removes the container before anything in it has run.
	Mounted func(ct Container, pid int) error
	// Restart, when set, is asked about a running container with the planned settings:
	// true replaces it by a new one (its root is read-only and its state is in mounts of
	// the guest's, so nothing is lost that a stop would keep), whose mounts the runtime
	// makes anew from their sources, and Mounted proves them.
	Restart func(Container) bool
}

// EnsureWith is Ensure with h run around the start.
func (c *Client) EnsureWith(ct Container, fresh bool, h StartHooks) (Change, error) {
	ins, err := c.inspect(ct.Name)
	if err != nil {
		return "", err
	}
	change := Created
	if ins != nil {
		if !fresh && ins.Config != nil && ins.Config.Labels[LabelSpecHash] == ct.Labels[LabelSpecHash] {
			if ins.State != nil && ins.State.Running {
				if h.Restart == nil || !h.Restart(ct) {
					return Unchanged, nil
				}
				// Replaced, as a new container: an init of the stopped one (podman 4.3.1,
				// rootless) handed the mount check a pid already gone. Nothing is lost that a
				// stop would keep: the root is read-only, its tmpfs dies with the process,
				// and lev's home and the tree are mounts of the guest's.
				if err := c.Remove(ct.Name); err != nil {
					return "", err
				}
				if err := c.create(ct, h); err != nil {
					return "", err
				}
				return Restarted, nil
			}
			if err := beforeStart(ct, h.Before); err != nil {
				return "", err
			}
			err := c.start(ct, h.Mounted)
			if err == nil {
				return Started, nil
			}
			var refused *mountsRefused
			if errors.As(err, &refused) {
				return "", err
			}
			// A guest that went down under podman (a netns stop, a VM power-off) can leave
			// the container's recorded state behind ("state improper"): sync it by a stop,
			// retry once, else replace the container below.
			_ = podcontainers.Stop(c.ctx, ct.Name, new(podcontainers.StopOptions).WithIgnore(true).WithTimeout(1))
			if err := c.start(ct, h.Mounted); err == nil {
				return Started, nil
			} else if errors.As(err, &refused) {
				return "", err
			}
		}
		if err := c.Remove(ct.Name); err != nil {
			return "", err
		}
		change = Recreated
	}
	if err := c.create(ct, h); err != nil {
		return "", err
	}
	return change, nil
}

// create creates ct and starts it, with h's checks.
func (c *Client) create(ct Container, h StartHooks) error {
	if err := beforeStart(ct, h.Before); err != nil {
		return err
	}
	if _, err := podcontainers.CreateWithSpec(c.ctx, Spec(ct), nil); err != nil {
		return fmt.Errorf("creating container %s: %w", ct.Name, err)
	}
	return c.start(ct, h.Mounted)
}

// mountsRefused is a Mounted hook's refusal: the container is gone, and no retry or
// replacement may follow (it would mount the same sources again).
type mountsRefused struct {
	name string
	err  error
}

func (e *mountsRefused) Error() string {
	return fmt.Sprintf("not starting container %s (removed before anything in it ran): %v", e.name, e.err)
}

func (e *mountsRefused) Unwrap() error { return e.err }

// start starts a created or stopped container. With mounted set, it is initialised first
// (the runtime makes its mounts and its process, which waits), mounted judges it by that
// pid, and only then does the process run.
func (c *Client) start(ct Container, mounted func(Container, int) error) error {
	if mounted != nil {
		if err := podcontainers.ContainerInit(c.ctx, ct.Name, nil); err != nil {
			return fmt.Errorf("initialising container %s: %w", ct.Name, err)
		}
		ins, err := podcontainers.Inspect(c.ctx, ct.Name, nil)
		if err != nil {
			return fmt.Errorf("inspecting container %s after init: %w", ct.Name, err)
		}
		pid := 0
		if ins.State != nil {
			pid = ins.State.Pid
		}
		if err := mounted(ct, pid); err != nil {
			_ = c.Remove(ct.Name)
			return &mountsRefused{name: ct.Name, err: err}
		}
	}
	if err := podcontainers.Start(c.ctx, ct.Name, nil); err != nil {
		return fmt.Errorf("starting container %s: %w", ct.Name, err)
	}
	return nil
}

func beforeStart(ct Container, before func(Container) error) error {
	if before == nil {
		return nil
	}
	if err := before(ct); err != nil {
		return fmt.Errorf("not starting container %s: %w", ct.Name, err)
	}
	return nil
}

func (c *Client) inspect(name string) (*define.InspectContainerData, error) {
	ok, err := podcontainers.Exists(c.ctx, name, nil)
	if err != nil {
		return nil, fmt.Errorf("looking up container %s: %w", name, err)
	}
	if !ok {
		return nil, nil
	}
	ins, err := podcontainers.Inspect(c.ctx, name, nil)
	if err != nil {
		return nil, fmt.Errorf("inspecting container %s: %w", name, err)
	}
	return ins, nil
}

// Remove force-removes a container; a missing one is not an error.
func (c *Client) Remove(name string) error {
	_, err := podcontainers.Remove(c.ctx, name, new(podcontainers.RemoveOptions).WithForce(true).WithIgnore(true).WithTimeout(5))
	if err != nil {
		return fmt.Errorf("removing container %s: %w", name, err)
	}
	return nil
}

// Stop stops a container, keeping it (and so the manager's conversation) for the next up.
func (c *Client) Stop(name string) error {
	if err := podcontainers.Stop(c.ctx, name, new(podcontainers.StopOptions).WithIgnore(true).WithTimeout(5)); err != nil {
		return fmt.Errorf("stopping container %s: %w", name, err)
	}
	return nil
}

// Status is podman's state of a container: libpod's ContainerStatus as inspect spells it
// (its String form, which TestStatusMatchesLibpod holds these constants to). Running says
// whether it runs; Status is for people and for why it does not.
type Status string

const (
	StatusCreated     Status = "created"     // made, never started (libpod's Configured)
	StatusInitialized Status = "initialized" // created in the OCI runtime, not started yet (transitory)
	StatusRunning     Status = "running"
	StatusPaused      Status = "paused"
	StatusStopping    Status = "stopping"
	StatusStopped     Status = "stopped" // ran and exited, not yet cleaned up
	StatusExited      Status = "exited"  // ran, exited and cleaned up
	StatusRemoving    Status = "removing"
	StatusUnknown     Status = "unknown"
)

// State is one container as status and acceptance see it.
type State struct {
	Name     string   `json:"name"`
	Role     string   `json:"role"`
	Image    string   `json:"image"`
	Status   Status   `json:"status"`
	Running  bool     `json:"running"`
	Pid      int      `json:"pid,omitempty"`
	ExitCode int32    `json:"exit_code"`
	CapAdd   []string `json:"cap_add,omitempty"`
	EffCaps  []string `json:"effective_caps"`
	Mounts   []string `json:"mounts"`
	Devices  []string `json:"devices,omitempty"`
	Network  string   `json:"network_mode"`
	Hash     string   `json:"spec_hash"`
}

// Inspect returns the state of one container, nil when it does not exist.
func (c *Client) Inspect(name string) (*State, error) {
	ins, err := c.inspect(name)
	if err != nil || ins == nil {
		return nil, err
	}
	st := &State{Name: ins.Name, Image: ins.ImageName, EffCaps: ins.EffectiveCaps}
	if st.Image == "" {
		st.Image = ins.Rootfs // a tree root (the default workbench) has no image
	}
	if ins.Config != nil {
		st.Role = ins.Config.Labels[LabelRole]
		st.Hash = ins.Config.Labels[LabelSpecHash]
	}
	if ins.State != nil {
		st.Status, st.Running, st.Pid, st.ExitCode = Status(ins.State.Status), ins.State.Running, ins.State.Pid, ins.State.ExitCode
	}
	if ins.HostConfig != nil {
		st.CapAdd = ins.HostConfig.CapAdd
		st.Network = ins.HostConfig.NetworkMode
		for _, d := range ins.HostConfig.Devices {
			st.Devices = append(st.Devices, d.PathOnHost)
		}
	}
	for _, m := range ins.Mounts {
		mode := "rw"
		if !m.RW {
			mode = "ro"
		}
		st.Mounts = append(st.Mounts, m.Source+":"+m.Destination+":"+mode)
	}
	sort.Strings(st.Mounts)
	return st, nil
}

// List returns every container lever made for instance.
func (c *Client) List(instance string) ([]State, error) {
	all := true
	lst, err := podcontainers.List(c.ctx, &podcontainers.ListOptions{All: &all, Filters: map[string][]string{"label": {LabelInstance + "=" + instance}}})
	if err != nil {
		return nil, fmt.Errorf("listing containers of %s: %w", instance, err)
	}
	var out []State
	for _, l := range lst {
		name := strings.Join(l.Names, ",")
		st, err := c.Inspect(name)
		if err != nil {
			return nil, err
		}
		if st != nil {
			out = append(out, *st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Logs returns a container's stdout and stderr so far.
func (c *Client) Logs(name string) (string, error) {
	out := make(chan string, 64)
	errc := make(chan error, 1)
	t := true
	go func() {
		errc <- podcontainers.Logs(c.ctx, name, &podcontainers.LogOptions{Stdout: &t, Stderr: &t}, out, out)
		close(out)
	}()
	var b strings.Builder
	for l := range out {
		b.WriteString(strings.TrimRight(l, "\n"))
		b.WriteByte('\n')
	}
	if err := <-errc; err != nil {
		return b.String(), fmt.Errorf("reading logs of %s: %w", name, err)
	}
	return b.String(), nil
}

// Wait waits for a container to exit and returns its exit code.
func (c *Client) Wait(name string) (int32, error) {
	code, err := podcontainers.Wait(c.ctx, name, nil)
	if err != nil {
		return 0, fmt.Errorf("waiting for %s: %w", name, err)
	}
	return code, nil
}
