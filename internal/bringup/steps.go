// Package bringup is lever apply/up: one table of steps (Steps) that both the plan and
// the execution walk, in the spec's order (jail up, egress verified or rebuilt before
// anything else starts, provisioning, podman, broker, enrolment, images, lev containers).
// Each step is a named value in its own file: what it needs and gives, the rule that
// skips it, and its run function. What a step finds (the run user's uid, the alias, the
// image refs, the podman connection) it returns as Facts, handed to the next step; the
// Instance holds only what the configuration and backend derive. Every step is
// idempotent, so a second run on a healthy jail changes nothing and says so; a warm run
// makes one guest call (the observation, which carries the egress snapshot and the
// backend's containment check).
package bringup

import (
	"context"
	"fmt"
	"time"
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

// Facts are what the observation and the steps found on the way, handed from step to
// step by value: each step gets the facts so far and returns them with its own added.
type Facts struct {
	UID       int    // the run user's uid (observation, provision)
	AliasV4   string // the host alias the egress rules name (observation, egress)
	AliasV6   string
	StatusSum string // the guest's package-state digest (observation; image)
	ImageRef  string // the lev image the lev containers run (image: a tarball's name)
	BenchRef  string // the workbench image (image)
	Podman    Podman // the run user's podman (observation, podman)
}

// Step is one row of the table.
type Step struct {
	ID string
	// Needs and Gives name the Facts fields the step reads and returns.
	Needs, Gives []string
	// Plan is the step's skip rule: from what was observed, "keep" (skipped: at most a
	// re-check without a guest call) or what it will do, and why.
	Plan func(PlanInput) (action, why string)
	// Run does the step, from the observation and the facts so far.
	Run func(ctx context.Context, in *Instance, obs Observed, f Facts) (Done, error)
}

// PlanInput is what a step's skip rule reads.
type PlanInput struct {
	Agents     []string // enrolment dir names
	Containers []string // every planned container's name
	Obs        Observed
}

// Done is what a step did: whether it changed anything, a line for people, and the
// facts for the steps after it.
type Done struct {
	Changed bool
	Detail  string
	Facts   Facts
}

// Steps is the one table: egress comes before anything that starts a process in the
// guest.
var Steps = []Step{jailStep, egressStep, provisionStep, podmanStep, brokerStep, enrolStep, imageStep, levStep}

// Result of one executed step.
type StepResult struct {
	ID       string        `json:"id"`
	Changed  bool          `json:"changed"`
	Detail   string        `json:"detail"`
	Duration time.Duration `json:"duration_ns"`
	Calls    int64         `json:"guest_calls"`
}

// Result of a whole bring-up.
type Result struct {
	Steps      []StepResult  `json:"steps"`
	Changed    bool          `json:"changed"`
	GuestCalls int64         `json:"guest_calls"`
	Duration   time.Duration `json:"duration_ns"`
	// facts are what the last step returned (tests read them).
	facts Facts
}

// Execute brings the jail up: one observation, then every step of the table in order.
// Progress goes to Options.Out, one line per step.
func (in *Instance) Execute(ctx context.Context) (*Result, error) {
	start := time.Now()
	in.Runner.Reset()
	res := &Result{}
	obs := in.ObserveWithEgress(ctx)
	f := obs.Facts
	p := newProgress(in.opts.Out, len(Steps))
	for i, s := range Steps {
		t0, c0 := time.Now(), in.Runner.Calls()
		p.running(i, s.ID)
		d, err := s.Run(ctx, in, obs, f)
		sr := StepResult{ID: s.ID, Changed: d.Changed, Detail: d.Detail, Duration: time.Since(t0), Calls: in.Runner.Calls() - c0}
		if err != nil {
			p.failed(i, s.ID, sr.Duration, err)
			res.facts = f
			return res, fmt.Errorf("%s: %w", s.ID, err)
		}
		p.done(i, sr)
		f = d.Facts
		res.Steps = append(res.Steps, sr)
		res.Changed = res.Changed || d.Changed
	}
	res.facts = f
	res.GuestCalls = in.Runner.Calls()
	res.Duration = time.Since(start)
	p.summary(in.cfg.Name, res)
	return res, nil
}
