package bringup

import (
	"context"

	"github.com/lever-jail/lever/internal/backend"
)

// jailStep: the guest is up. Skipped when the observation call answered; a running guest
// is checked again every time all the same: its host-side containment here (no guest
// call: Lima's realized config), its in-guest part in the observation's snapshot, judged
// by the egress step. A backend that reads the guest after starting it (UpSnapshotter)
// reads the egress snapshot in that call, and hands it on as BootSnapshot.
var jailStep = Step{
	ID:    StepJail,
	Gives: []Fact{FactBootSnapshot},
	Plan: func(p PlanInput) (Action, string) {
		if p.Obs.GuestReachable {
			return ActionKeep, "guest is up"
		}
		return ActionCreate, "guest is not reachable"
	},
	Run: func(ctx context.Context, in *Instance, obs Observed, f Facts) (Done, error) {
		// First, on every up: a run user that is a host account must be this jail's alone
		// (its podman service, containers and credentials would otherwise be shared).
		if c, ok := in.b.(RunUserClaimer); ok {
			if err := c.ClaimRunUser(); err != nil {
				return Done{Facts: f}, err
			}
		}
		if obs.GuestReachable {
			if c, ok := in.b.(backend.Containment); ok {
				if err := c.CheckHost(ctx); err != nil {
					return Done{Facts: f}, err
				}
				return Done{Detail: "guest is up; containment re-checked", Facts: f}, nil
			}
			return Done{Detail: "guest is up", Facts: f}, nil
		}
		if u, ok := in.b.(UpSnapshotter); ok {
			// The backend's call after the boot is the egress snapshot (one round trip
			// fewer); the egress step judges it as it would its own.
			req := in.Spec.RebuildRequest()
			if in.helper != nil && !in.InPlace {
				// and whether lev is installed (a restarted guest keeps it): the
				// install, or no install, follows the egress step without a look
				req.Extra = in.helper.LookPart()
			}
			secs, err := u.EnsureUpWithSnapshot(ctx, req)
			if err != nil {
				return Done{Facts: f}, err
			}
			f.BootSnapshot = secs
			return Done{Changed: true, Detail: "guest started", Facts: f}, nil
		}
		if err := in.b.EnsureUp(ctx); err != nil {
			return Done{Facts: f}, err
		}
		return Done{Changed: true, Detail: "guest started", Facts: f}, nil
	},
}
