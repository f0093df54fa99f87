package bringup

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/tail"
)

// levStep: every planned container (each agent's lev container and its bench) runs with
// its planned settings; one whose spec hash changed is recreated. Skipped when every
// planned container runs (podman is still asked; no guest call unless one starts).
var levStep = Step{
	ID:    StepLev,
	Needs: []Fact{FactPodman, FactUID, FactAliasV4, FactImageRef, FactBenchRef},
	Plan: func(p PlanInput) (Action, string) {
		var todo []string
		for _, c := range p.Containers {
			switch st := p.Obs.Containers[c]; st {
			case ContainerRunning:
				if why := remount(p.Obs, c); why != "" {
					todo = append(todo, fmt.Sprintf("%s (restart: %s)", c, why))
				}
			case "":
				todo = append(todo, c+" (create)")
			default:
				todo = append(todo, fmt.Sprintf("%s (%s)", c, st))
			}
		}
		if len(todo) == 0 {
			return ActionKeep, "every lev container runs with its planned settings"
		}
		return ActionCreate, strings.Join(todo, ", ")
	},
	Run: func(ctx context.Context, in *Instance, o Observed, f Facts) (Done, error) {
		changed, detail, err := in.stepLev(ctx, o, f)
		return Done{Changed: changed, Detail: detail, Facts: f}, err
	},
}

// remount is why running container c must start again ("" when it need not): the
// observation's proof of its in-tree mounts or of its exec channel failed, or was asked
// for and not answered (then the lev step proves them itself).
func remount(o Observed, c string) string {
	if !o.MountsAsked {
		return ""
	}
	if !o.MountsProven {
		return "its mounts of the tree were not proven"
	}
	if why := o.MountProofs[c]; why != "" {
		return "its mounts of the tree are not the planned ones: " + why
	}
	if why := o.ChannelProofs[c]; why != "" {
		return "its exec channel does not prove itself: " + why
	}
	return ""
}

func (in *Instance) stepLev(ctx context.Context, o Observed, f Facts) (bool, string, error) {
	c := f.Podman
	if c == nil {
		return false, "", fmt.Errorf("no connection to the run user's podman")
	}
	cs, err := in.Containers(f)
	if err != nil {
		return false, "", err
	}
	if err := in.customImagesPresent(c); err != nil {
		return false, "", err
	}
	running := false
	for _, ct := range cs {
		running = running || o.Containers[ct.Name] == ContainerRunning
	}
	if o.MountsAsked && !o.MountsProven && running {
		// The observation could not prove the running containers' mounts (a VM guest
		// without lever's lev yet): one helper call of its own, which installs it.
		resp, err := in.proveLiveMounts(ctx)
		if err != nil {
			return false, "", err
		}
		o.MountProofs, o.ChannelProofs, o.MountsProven = resp.Proofs, resp.Channels, true
	}
	hooks := containers.StartHooks{
		Mounted: func(ct containers.Container, pid int) error { return in.checkMounts(ctx, ct, pid) },
		// A running container whose in-tree mounts are not the planned ones (a
		// read-only lever.yaml detached by a rename-save on the host) starts again: the
		// runtime makes its mounts anew, and Mounted proves them before it runs.
		// So does a workbench whose exec channel does not prove itself: its server
		// starts again, with a new key and socket.
		Restart: func(ct containers.Container) bool { return remount(o, ct.Name) != "" },
	}
	// One after the other. Created at once (they do not depend on each other), a fresh
	// rootless service (podman 4.3.1) refused the second: "keep-id requires additional
	// UIDs or GIDs defined in /etc/subuid" while the first was still setting up the run
	// user's namespace (a traced Lima cold up, 2026-12-01).
	changed := false
	var parts []string
	for _, ct := range cs {
		ch, err := c.EnsureContainer(ct, in.opts.Fresh, hooks)
		if err != nil {
			return false, "", err
		}
		if ch != containers.Unchanged {
			changed = true
		}
		parts = append(parts, ct.Name+" "+string(ch))
	}
	// A stopped-then-started container may exit at once (bad config): report it.
	for _, ct := range cs {
		st, err := c.Inspect(ct.Name)
		if err == nil && st != nil && !st.Running {
			logs, _ := c.Logs(ct.Name)
			return changed, "", fmt.Errorf("%s is %s (exit %d): %s", ct.Name, st.Status, st.ExitCode, tail.Lines(logs, 5, " | "))
		}
	}
	sort.Strings(parts)
	return changed, strings.Join(parts, ", "), nil
}
