// Package bringup is lever apply/up: a pure Plan from the configuration and what was
// observed, then Execute, which runs the steps in the spec's order (jail up, egress
// verified or rebuilt before anything else starts, provisioning, broker, lev image, lev
// containers), printing one progress line per step with its time. Every step is
// idempotent, so a second run on a healthy jail changes nothing and says so.
package bringup

import (
	"fmt"
	"strings"
)

// Step ids, in execution order.
const (
	StepJail      = "jail"
	StepEgress    = "egress"
	StepProvision = "provision"
	StepPodman    = "podman"
	StepBroker    = "broker"
	StepEnrol     = "enrol"
	StepImage     = "image"
	StepLev       = "lev"
)

// Order is the fixed order of the steps: egress comes before anything that starts a
// process in the guest.
var Order = []string{StepJail, StepEgress, StepProvision, StepPodman, StepBroker, StepEnrol, StepImage, StepLev}

// Observed is what a read-only look at the host and guest found.
type Observed struct {
	GuestReachable bool
	EgressMatch    bool
	EgressDiff     []string
	StampCurrent   bool
	ServiceUp      bool
	BrokerRunning  bool
	BrokerSANOK    bool
	// Enrolled: agent dir name -> holds a certificate valid for at least a day.
	Enrolled map[string]bool
	// Settings: agent dir name -> its pushed lev settings match the host's and its lev
	// home and bench dir exist.
	Settings     map[string]bool
	ImagePresent bool
	ImageRef     string
	// BenchPresent: the workbench image (BenchRef, content-addressed) is in podman.
	BenchPresent bool
	BenchRef     string
	// Containers: name -> "running", "stopped", "stale" (spec changed) or absent.
	Containers map[string]string
}

// Planned is one step of the plan.
type Planned struct {
	ID     string `json:"id"`
	Action string `json:"action"` // keep | create | repair | start
	Why    string `json:"why"`
}

// Plan decides each step's action. It is pure.
func Plan(agents []string, containers []string, o Observed) []Planned {
	var out []Planned
	add := func(id, action, why string) { out = append(out, Planned{ID: id, Action: action, Why: why}) }
	if o.GuestReachable {
		add(StepJail, "keep", "guest is up")
	} else {
		add(StepJail, "create", "guest is not reachable")
	}
	switch {
	case !o.GuestReachable:
		add(StepEgress, "create", "applied as soon as the guest is up, before anything starts")
	case o.EgressMatch:
		add(StepEgress, "keep", "live chains match the desired ruleset (verified again at run time)")
	default:
		add(StepEgress, "repair", "drift: "+strings.Join(o.EgressDiff, "; "))
	}
	if o.StampCurrent {
		add(StepProvision, "keep", "stamp names these scripts and this boot")
	} else {
		add(StepProvision, "create", "no current provisioning stamp")
	}
	if o.ServiceUp {
		add(StepPodman, "keep", "run user's podman service is up")
	} else {
		add(StepPodman, "start", "run user's podman service is down")
	}
	switch {
	case o.BrokerRunning && o.BrokerSANOK:
		add(StepBroker, "keep", "running, certificate names the alias IP")
	case o.BrokerRunning:
		add(StepBroker, "repair", "running without the alias IP in its certificate: restart")
	default:
		add(StepBroker, "start", "not running")
	}
	var missing, stale []string
	for _, a := range agents {
		if !o.Enrolled[a] {
			missing = append(missing, a)
		}
		if !o.Settings[a] {
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
		add(StepEnrol, "keep", "every agent holds a valid client certificate and current lev settings")
	} else {
		add(StepEnrol, "create", strings.Join(enrol, "; "))
	}
	switch {
	case o.ImagePresent && o.BenchPresent:
		add(StepImage, "keep", o.ImageRef+" and workbench "+o.BenchRef+" are loaded")
	case o.ImagePresent:
		bench := o.BenchRef
		if bench == "" {
			bench = "(tag decided from the guest's packages)"
		}
		add(StepImage, "create", "build the workbench "+bench)
	default:
		add(StepImage, "create", "load "+o.ImageRef+" and the workbench")
	}
	var todo []string
	for _, c := range containers {
		switch st := o.Containers[c]; st {
		case "running":
		case "":
			todo = append(todo, c+" (create)")
		default:
			todo = append(todo, fmt.Sprintf("%s (%s)", c, st))
		}
	}
	if len(todo) == 0 {
		add(StepLev, "keep", "every lev container runs with its planned settings")
	} else {
		add(StepLev, "create", strings.Join(todo, ", "))
	}
	return out
}

// Changed reports whether a plan does anything.
func Changed(p []Planned) bool {
	for _, s := range p {
		if s.Action != "keep" {
			return true
		}
	}
	return false
}
