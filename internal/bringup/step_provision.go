package bringup

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/provision"
)

// provisionStep: packages, the run user, sysctls, podman's settings. Skipped when the
// root-owned stamp names these scripts and this boot (read in the observation call).
var provisionStep = Step{
	ID:    StepProvision,
	Needs: []Fact{FactUID, FactStatusSum},
	Gives: []Fact{FactUID, FactStatusSum},
	Plan: func(p PlanInput) (Action, string) {
		if p.Obs.StampCurrent {
			return ActionKeep, "stamp names these scripts and this boot"
		}
		return ActionCreate, "no current provisioning stamp"
	},
	Run: func(ctx context.Context, in *Instance, obs Observed, f Facts) (Done, error) {
		var r provision.Result
		var err error
		if obs.GuestReachable {
			r, err = provision.Ensure(ctx, in.Runner, in.provP, &obs.Stamp)
		} else {
			// The guest did not answer the observation: it was down, so it has just
			// booted and no stamp can name this boot. The script is idempotent; reading
			// the stamp first would only cost a round trip.
			r, err = provision.Run(ctx, in.Runner, in.provP, false)
		}
		if err != nil {
			return Done{Facts: f}, err
		}
		if r.Skipped {
			if f.UID == 0 {
				// the guest was down when observed: read the run user's uid now
				res, err := guest.RunOK(ctx, in.Runner, guest.Cmd{As: guest.Root, Argv: []string{"id", "-u", in.RunUser}})
				if err != nil {
					return Done{Facts: f}, fmt.Errorf("run user %s: %w", in.RunUser, err)
				}
				if f.UID, err = strconv.Atoi(strings.TrimSpace(string(res.Stdout))); err != nil {
					return Done{Facts: f}, fmt.Errorf("run user %s: uid %q", in.RunUser, res.Stdout)
				}
			}
			return Done{Detail: "stamp current: installs skipped", Facts: f}, nil
		}
		f.UID = r.UID
		if len(r.Changes) == 0 {
			return Done{Detail: "nothing to change (stamp refreshed)", Facts: f}, nil
		}
		// Provisioning may have installed packages: the observed dpkg status digest is
		// stale, so the image step reads the database again.
		f.StatusSum = ""
		return Done{Changed: true, Detail: strings.Join(r.Changes, "; "), Facts: f}, nil
	},
}
