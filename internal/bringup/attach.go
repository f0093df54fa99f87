package bringup

import (
	"context"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/containers"
)

// NotUpError says the jail cannot be reached as it is: the host commands that work in a
// running jail (run, ps, logs, shell...) refuse with it and start nothing.
type NotUpError struct {
	Instance, Config, Why string
}

func (e *NotUpError) Error() string {
	return fmt.Sprintf("jail %s is not up (%s): run lever up -c %s", e.Instance, e.Why, e.Config)
}

// Attach reaches a jail that is up, changing nothing: the guest answers, the run user's
// podman service is up and every lev container of the plan is running. It returns the
// client on the podman socket bring-up uses (forwarded from a VM guest, the run user's own
// socket in place), so the host commands go through the backend and nothing else.
// Observe is read-only; the socket forward it may re-establish is the same one status and
// bring-up use.
func (in *Instance) Attach(ctx context.Context) (*containers.Client, error) {
	notUp := func(why string) error {
		return &NotUpError{Instance: in.cfg.Name, Config: in.cfg.Path, Why: why}
	}
	obs := in.Observe(ctx)
	switch {
	case !obs.GuestReachable:
		return nil, notUp("guest " + in.cfg.MachineName() + " does not answer")
	case !obs.ServiceUp:
		return nil, notUp("the run user's podman service is down")
	}
	var missing []string
	for _, name := range in.LevContainers() {
		if obs.Containers[name] != ContainerRunning {
			st := string(obs.Containers[name])
			if st == "" {
				st = "missing"
			}
			missing = append(missing, name+" "+st)
		}
	}
	if len(missing) > 0 {
		return nil, notUp(strings.Join(missing, ", "))
	}
	c, err := in.connect(ctx, obs.Facts.UID)
	if err != nil {
		return nil, notUp(err.Error())
	}
	return c, nil
}

// LevContainers names the lev container of each agent: the manager first, then the
// workers in lever.yaml's order.
func (in *Instance) LevContainers() []string {
	out := []string{containers.ContainerName(in.cfg.Name, containers.Manager, "")}
	for _, w := range in.cfg.Workers {
		out = append(out, containers.ContainerName(in.cfg.Name, containers.Worker, w.Name))
	}
	return out
}
