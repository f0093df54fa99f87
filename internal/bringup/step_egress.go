package bringup

import (
	"context"
	"strings"

	"github.com/lever-jail/lever/internal/guest"
)

// egressStep: the live chains are exactly the desired ones, rebuilt on any drift, before
// anything else starts. Warm, it judges the snapshot the observation call read (no guest
// call of its own); cold on a backend that reads it after the boot, that one (the rebuild
// is then its only call, or its two when a chainless snapshot's read-back shows OUTPUT
// needs nft's rebuild: docs/egress.md); the containment check read with it is judged
// first. Never skipped: ActionKeep means the snapshot matched.
var egressStep = Step{
	ID:    StepEgress,
	Needs: []Fact{FactBootSnapshot},
	Gives: []Fact{FactAliasV4, FactAliasV6},
	Plan: func(p PlanInput) (Action, string) {
		switch o := p.Obs; {
		case !o.GuestReachable:
			return ActionCreate, "applied as soon as the guest is up, before anything starts"
		case o.EgressMatch:
			return ActionKeep, "live chains match the desired ruleset (verified again at run time)"
		default:
			return ActionRepair, "drift: " + strings.Join(o.EgressDiff, "; ")
		}
	},
	Run: func(ctx context.Context, in *Instance, obs Observed, f Facts) (Done, error) {
		var rep guest.Report
		var err error
		switch {
		case obs.Snapshot != nil:
			rep, err = guest.EnsureEgressFrom(ctx, in.Runner, in.Spec, *obs.Snapshot)
		case f.BootSnapshot != nil:
			// read in the backend's call after the boot: parsed and judged here exactly as
			// a snapshot of this step's own
			var snap guest.Snapshot
			if snap, err = guest.ParseSnapshot(f.BootSnapshot, in.Spec.RebuildRequest()); err == nil {
				rep, err = guest.EnsureEgressFrom(ctx, in.Runner, in.Spec, snap)
			}
		default:
			rep, err = guest.EnsureEgress(ctx, in.Runner, in.Spec)
		}
		if err != nil {
			return Done{Facts: f}, err
		}
		f.AliasV4, f.AliasV6 = rep.Desired.AliasV4, rep.Desired.AliasV6
		if rep.Outcome == guest.Unchanged {
			return Done{Detail: "verified: both families match (alias " + f.AliasV4 + ")", Facts: f}, nil
		}
		d := "rebuilt"
		if len(rep.Lines) > 0 {
			d += ": " + strings.Join(rep.Lines, "; ")
		}
		return Done{Changed: true, Detail: d, Facts: f}, nil
	},
}
