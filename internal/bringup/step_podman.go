package bringup

import (
	"context"

	"github.com/lever-jail/lever/internal/containers"
)

// podmanStep: the run user's podman service runs and the host reaches it. Skipped when
// the observation found the service up (its connection is reused).
var podmanStep = Step{
	ID:    StepPodman,
	Needs: []Fact{FactUID, FactPodman},
	Gives: []Fact{FactPodman},
	Plan: func(p PlanInput) (Action, string) {
		if p.Obs.ServiceUp {
			return ActionKeep, "run user's podman service is up"
		}
		return ActionStart, "run user's podman service is down"
	},
	Run: func(ctx context.Context, in *Instance, obs Observed, f Facts) (Done, error) {
		d := Done{Detail: "podman service up"}
		if !obs.ServiceUp {
			how, err := containers.StartService(ctx, in.Runner, in.RunUser)
			if err != nil {
				return Done{Facts: f}, err
			}
			d = Done{Changed: true, Detail: "started the run user's podman service"}
			if how == "ready" {
				// the observation missed a listening service (it came up in between)
				d = Done{Detail: "podman service was already listening"}
			}
			f.Podman = nil
		}
		if f.Podman == nil {
			c, err := in.podman.Dial(ctx, f.UID)
			if err != nil {
				return Done{Facts: f}, err
			}
			f.Podman = c
		}
		d.Facts = f
		return d, nil
	},
}
