package mountcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/user"
	"path"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/lev/bench"
)

// Why running containers are proven again: a bind mount holds the inode its source had
// when the container started. A rename-save of lever.yaml on the host (sed -i, most
// editors: write a temp file, rename it over) puts a new inode at the path, and since
// Linux 3.18 a rename or unlink over a dentry that is a mount point in another mount
// namespace detaches those mounts: the container then sees the new lever.yaml through
// its writable tree, with no read-only mount on it. Nothing in a running container
// repairs that; only a new start makes the mounts again. So every bring-up proves the
// running containers' in-tree mounts with the same Check as at their start, and the
// caller restarts any that fail.

// LiveRequest asks for the proof of running containers' in-tree mounts, the containers
// found by name in RunUser's podman (their pids are podman's to tell: the host does not
// have them before its observation call, which carries this proof).
type LiveRequest struct {
	RunUser    string          `json:"run_user"`
	Containers []LiveContainer `json:"containers"`
}

// LiveContainer is one container to prove: Tree and Mounts as in Request. Channel, for
// a workbench, is its exec channel's socket relative to the run user's runtime dir
// (/run/user/UID): the channel must answer a ping with a proof under its start's key
// (internal/lev/bench), else something else took the socket's place, or the server is
// gone.
type LiveContainer struct {
	Name    string  `json:"name"`
	Tree    string  `json:"tree"`
	Mounts  []Mount `json:"mounts"`
	Channel string  `json:"channel,omitempty"`
}

// LiveResponse is the proof by container name: "" proven, else why not; Channels the
// same for the workbenches' exec channels. A container that does not exist or does not
// run is absent (the caller starts it, with the check made at every start).
type LiveResponse struct {
	Proofs   map[string]string `json:"proofs"`
	Channels map[string]string `json:"channels,omitempty"`
}

// MaxLive caps the containers of one LiveRequest.
const MaxLive = 256

// ServeLive reads a LiveRequest (strict JSON) from r and writes its LiveResponse to w.
func ServeLive(r io.Reader, w io.Writer) error {
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	dec.DisallowUnknownFields()
	var req LiveRequest
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("live mount check: reading the request: %w", err)
	}
	if len(req.Containers) > MaxLive {
		return fmt.Errorf("live mount check: %d containers, over the cap of %d", len(req.Containers), MaxLive)
	}
	u, err := user.Lookup(req.RunUser)
	if err != nil {
		return fmt.Errorf("live mount check: run user %q: %w", req.RunUser, err)
	}
	runtime := "/run/user/" + u.Uid
	pd := podmanAt(runtime + "/podman/podman.sock")
	resp := LiveResponse{Proofs: map[string]string{}, Channels: map[string]string{}}
	for _, c := range req.Containers {
		if c.Channel != "" && (path.IsAbs(c.Channel) || path.Clean(c.Channel) != c.Channel || strings.HasPrefix(c.Channel, "../")) {
			return fmt.Errorf("live mount check: channel %q is not a clean path below the run user's runtime dir", c.Channel)
		}
		pid, err := pd.runningPid(c.Name)
		if err != nil {
			return fmt.Errorf("live mount check: %w", err)
		}
		if pid == 0 {
			continue
		}
		resp.Proofs[c.Name] = ""
		if err := Check(Request{Pid: pid, Tree: c.Tree, Mounts: c.Mounts}); err != nil {
			resp.Proofs[c.Name] = err.Error()
		}
		if c.Channel != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			resp.Channels[c.Name] = ""
			if err := (bench.Client{Socket: path.Join(runtime, c.Channel)}).Ping(ctx); err != nil {
				resp.Channels[c.Name] = err.Error()
			}
			cancel()
		}
	}
	return json.NewEncoder(w).Encode(resp)
}

// podman is the run user's podman REST service, asked only for a container's state.
type podman struct{ c *http.Client }

func podmanAt(sock string) podman {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return podman{&http.Client{Transport: tr, Timeout: 20 * time.Second}}
}

// runningPid is the pid of container name's process in the guest, 0 when it does not
// exist or does not run.
func (p podman) runningPid(name string) (int, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return 0, fmt.Errorf("bad container name %q", name)
	}
	res, err := p.c.Get("http://podman/v4.0.0/libpod/containers/" + url.PathEscape(name) + "/json")
	if err != nil {
		return 0, fmt.Errorf("asking podman about %s: %w", name, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return 0, nil
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("asking podman about %s: HTTP %d", name, res.StatusCode)
	}
	var ins struct {
		State struct {
			Running bool `json:"Running"`
			Pid     int  `json:"Pid"`
		} `json:"State"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 4<<20)).Decode(&ins); err != nil {
		return 0, fmt.Errorf("reading podman's answer about %s: %w", name, err)
	}
	if !ins.State.Running || ins.State.Pid <= 0 {
		return 0, nil
	}
	return ins.State.Pid, nil
}
