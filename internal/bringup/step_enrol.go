package bringup

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/cap/ca"
	"github.com/lever-jail/lever/internal/cap/ticket"
	"github.com/lever-jail/lever/internal/containers"

	"github.com/lever-jail/lever/internal/guestside"
)

// enrolStep: every agent holds a valid client certificate (its key made in the guest)
// and the user's current lev settings, with its lev home and bench dir. One guest call
// for all agents; skipped when the observation found every certificate valid and every
// agent's settings current. It needs the broker running (its tickets are redeemed
// there), not podman, so it runs beside the podman step.
var enrolStep = Step{
	ID:      StepEnrol,
	Needs:   []Fact{FactUID, FactAliasV4, FactBroker},
	Overlap: true,
	Plan: func(p PlanInput) (Action, string) {
		var missing, stale []string
		for _, a := range p.Agents {
			if !p.Obs.Enrolled[a] {
				missing = append(missing, a)
			}
			if !p.Obs.Settings[a] {
				stale = append(stale, a)
			}
		}
		var enrol []string
		if len(missing) > 0 {
			enrol = append(enrol, "enrol "+strings.Join(missing, ", "))
		}
		if len(stale) > 0 {
			enrol = append(enrol, "push lev settings and dirs to "+strings.Join(stale, ", "))
		}
		if len(enrol) == 0 {
			return ActionKeep, "every agent holds a valid client certificate and current lev settings"
		}
		return ActionCreate, strings.Join(enrol, "; ")
	},
	Run: func(ctx context.Context, in *Instance, obs Observed, f Facts) (Done, error) {
		changed, detail, err := in.stepEnrol(ctx, obs, f)
		return Done{Changed: changed, Detail: detail, Facts: f}, err
	},
}

func (in *Instance) stepEnrol(ctx context.Context, obs Observed, f Facts) (bool, string, error) {
	var need, push []string
	for _, a := range in.Agents() {
		if !obs.Enrolled[a] {
			need = append(need, a)
		}
		if !obs.Settings[a] {
			push = append(push, a)
		}
	}
	if len(need) == 0 && len(push) == 0 {
		return false, "every agent holds a valid client certificate and current lev settings", nil
	}
	caPEM, err := os.ReadFile(brokerctl.CAPath(in.cfg.StateDir()))
	if err != nil {
		return false, "", fmt.Errorf("reading the broker CA: %w", err)
	}
	store, err := ticket.Open(brokerctl.TicketDir(in.cfg.StateDir()))
	if err != nil {
		return false, "", err
	}
	req := EnrolRequest{BrokerURL: in.brokerURL(f), CAPEM: string(caPEM), UID: f.UID, LevHomeRoot: in.levHomeRoot(), LevHomeBase: in.levHomeBase()}
	if len(push) > 0 {
		req.Settings, req.SettingsHash = in.settings, in.settingsHash
	}
	for _, a := range in.Agents() {
		ea := EnrolAgent{Name: in.cfg.Name + "-" + a, Dir: agentsRoot(f.UID) + "/" + a,
			Home: path.Join(in.levHomeRoot(), a), Bench: benchRoot(f.UID) + "/" + a, Push: !obs.Settings[a]}
		if !obs.Enrolled[a] {
			role := ca.RoleWorker
			if a == containers.AgentDir(containers.Manager, "") {
				role = ca.RoleManager
			}
			tk, err := store.Issue(ea.Name, role, 10*time.Minute)
			if err != nil {
				return false, "", err
			}
			ea.Ticket = tk
		}
		if ea.Ticket != "" || ea.Push {
			req.Agents = append(req.Agents, ea)
		}
	}
	body, _ := json.Marshal(req)
	if len(body) > MaxEnrolRequest {
		return false, "", fmt.Errorf("the enrolment request is %d bytes, over the guest helper's %d: make lev.agents smaller", len(body), MaxEnrolRequest)
	}
	if _, err := in.runHelper(ctx, guestside.ModeEnrol, body); err != nil {
		return false, "", fmt.Errorf("enrolling in the guest: %w", err)
	}
	var parts []string
	if len(need) > 0 {
		parts = append(parts, "enrolled "+strings.Join(need, ", ")+" (keys generated in the guest)")
	}
	if len(push) > 0 {
		parts = append(parts, "lev settings "+in.settingsHash[:12]+" and dirs for "+strings.Join(push, ", "))
	}
	return true, strings.Join(parts, "; "), nil
}
