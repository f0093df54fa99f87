package bringup

import "context"

// DryRun is apply --dry-run's plan: the observation Execute starts from (one guest call,
// the egress snapshot and containment check included) walked through the same table of
// steps, so the plan shown is the one a real run would follow. It changes nothing.
func (in *Instance) DryRun(ctx context.Context) []Planned {
	return in.Plan(in.ObserveWithEgress(ctx))
}
