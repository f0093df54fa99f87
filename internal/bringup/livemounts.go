package bringup

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/guestside/mountcheck"
)

// The running containers' in-tree mounts are proven again at every bring-up (see
// mountcheck.ServeLive: a rename-save of lever.yaml on the host detaches its read-only
// mount in the running containers), in the observation call itself: its script runs the
// mounts-live helper, which asks the run user's podman for the pids. A warm up stays one
// guest call. A container whose proof fails is restarted by the lev step, its mounts
// made anew and proven at the start as always.

// mountsSection is the observation's section with the proof (mountcheck.LiveResponse).
const mountsSection = "mounts"

// liveMountsFn is the observation script's shell function that runs the helper.
const liveMountsFn = "lever_mounts_live"

// liveMountsRequest is the proof to ask for: every planned container's in-tree mounts
// (mount sources and destinations do not depend on the facts the observation finds).
// nil when there is nothing to prove.
func (in *Instance) liveMountsRequest() (*mountcheck.LiveRequest, error) {
	cs, err := in.plan(Facts{UID: 1}, "i", "b")
	if err != nil {
		return nil, err
	}
	req := &mountcheck.LiveRequest{RunUser: in.RunUser}
	for _, ct := range cs {
		tree, ms := in.treeMountsOf(ct)
		lc := mountcheck.LiveContainer{Name: ct.Name, Tree: tree, Mounts: ms}
		if ct.Role == containers.Bench {
			// the planned source of its channel's dir (planned for uid 1 here), below the
			// run user's runtime dir, where the helper finds it for the real uid
			for _, m := range ct.Mounts {
				if rel, ok := strings.CutPrefix(m.Source, "/run/user/1/"); ok && m.Dest == containers.BenchMount {
					lc.Channel = path.Join(rel, path.Base(containers.BenchSocket))
				}
			}
		}
		if len(ms) > 0 || lc.Channel != "" {
			req.Containers = append(req.Containers, lc)
		}
	}
	if len(req.Containers) == 0 {
		return nil, nil
	}
	return req, nil
}

// treeMountsOf is ct's mounts below the tree, as the mount check takes them. The tree
// itself is lever's guest path, whose name the agents cannot change: only what lies below
// it is theirs to swap.
func (in *Instance) treeMountsOf(ct containers.Container) (string, []mountcheck.Mount) {
	tree := strings.TrimSuffix(in.TreeSrc, "/")
	var out []mountcheck.Mount
	for _, m := range ct.Mounts {
		if rel, ok := strings.CutPrefix(m.Source, tree+"/"); ok {
			out = append(out, mountcheck.Mount{Rel: rel, Dest: m.Dest, ReadOnly: m.ReadOnly})
		}
	}
	return tree, out
}

// liveMountsPart is the observation's addition: the helper function and the request in
// the environment. None (and Observed.MountsAsked false) without a helper or a plan.
func (in *Instance) liveMountsPart() (part string, env []string) {
	if in.helper == nil || in.levErr != nil {
		return "", nil
	}
	req, err := in.liveMountsRequest()
	if err != nil || req == nil {
		return "", nil
	}
	fn, err := in.helper.Part(liveMountsFn, guestside.ModeMountsLive)
	if err != nil {
		return "", nil
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", nil
	}
	return fn, []string{"LEVER_MOUNTS_REQ=" + string(body)}
}

// readLiveMounts reads the proof section into o: MountsProven when the helper answered.
func readLiveMounts(secs guest.Sections, o *Observed) {
	out, err := secs.OK(mountsSection)
	if err != nil {
		o.MountsErr = err
		return
	}
	var resp mountcheck.LiveResponse
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		o.MountsErr = fmt.Errorf("reading the mount proof: %w", err)
		return
	}
	o.MountProofs, o.ChannelProofs, o.MountsProven = resp.Proofs, resp.Channels, true
}

// proveLiveMounts is the proof as a helper call of its own, for a bring-up whose
// observation could not carry it (a VM guest without lever's lev yet: the call installs
// it). Not made on a warm up.
func (in *Instance) proveLiveMounts(ctx context.Context) (mountcheck.LiveResponse, error) {
	var resp mountcheck.LiveResponse
	req, err := in.liveMountsRequest()
	if err != nil || req == nil {
		return resp, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return resp, err
	}
	res, err := in.runHelper(ctx, guestside.ModeMountsLive, body)
	if err != nil {
		return resp, fmt.Errorf("proving the running containers' mounts: %w", err)
	}
	if err := json.Unmarshal(res.Stdout, &resp); err != nil {
		return resp, fmt.Errorf("reading the mount proof: %w", err)
	}
	return resp, nil
}
