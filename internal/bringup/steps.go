// Package bringup owns a jail's lifecycle: lever apply/up (one table of steps, Steps, that
// both the plan and the execution walk), status, stop and destroy. The steps run in the
// order docs/bringup.md gives ("The steps, in order"): the guest up, egress verified or
// rebuilt before anything else starts, provisioning, broker, podman, enrolment, images,
// lev containers. Each step is a named value in its own file: what it needs and gives, the
// rule that skips it, and its run function. What a step finds (the run user's uid, the
// alias, the image refs, the podman connection) it returns as Facts, handed to the next
// step; the Instance holds only what the configuration and backend derive. Every step is
// idempotent, so a second run on a healthy jail changes nothing and says so; a warm run
// makes one guest call (the observation, which carries the egress snapshot and the
// backend's containment check).
//
// It must not parse flags or print for a command (internal/cli does), build firewall
// rules (internal/egress and internal/guest do) or reach the guest except through the
// backend's guest.Runner and the run user's podman; nothing below it may import it.
package bringup

import (
	"context"
	"fmt"
	"time"

	"github.com/lever-jail/lever/internal/guest"
)

// Step ids, in execution order.
const (
	StepJail      = "jail"
	StepEgress    = "egress"
	StepProvision = "provision"
	StepBroker    = "broker"
	StepPodman    = "podman"
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
	Broker    string // the broker's listen address, once it runs with the alias (broker)
	// BootSnapshot is the egress snapshot's answer, read in the backend's own call after
	// the boot (jail, cold, on an UpSnapshotter); the egress step parses and judges it.
	BootSnapshot guest.Sections
}

// Fact names one Facts field, so a step's Needs and Gives are checked by the compiler
// (a misspelt field no longer compiles) and copied by with without reflection.
type Fact int

// The facts, one per Facts field.
const (
	FactUID Fact = iota
	FactAliasV4
	FactAliasV6
	FactStatusSum
	FactImageRef
	FactBenchRef
	FactPodman
	FactBroker
	FactBootSnapshot
	numFacts // not a fact: the count, for the tests
)

var factNames = [numFacts]string{"UID", "AliasV4", "AliasV6", "StatusSum", "ImageRef", "BenchRef", "Podman", "Broker", "BootSnapshot"}

// String is the Facts field's name.
func (f Fact) String() string {
	if f >= 0 && f < numFacts {
		return factNames[f]
	}
	return fmt.Sprintf("Fact(%d)", int(f))
}

// Step is one row of the table.
type Step struct {
	ID string
	// Needs and Gives name the Facts fields the step reads and returns; only the fields
	// in Gives are taken from what it returns.
	Needs, Gives []Fact
	// NeedsFor adds needs that depend on the configuration (the image step needs podman
	// only for an image, not for lever's trees).
	NeedsFor func(in *Instance) []Fact
	// Overlap: the step may start as soon as the steps that give its Needs (and egress)
	// are done, running beside the steps in between (its guest calls too: the guest
	// serves them concurrently); its line still prints in its place and the steps after
	// it wait for it. Only for a step whose Gives no step in between needs, and that
	// changes nothing a step in between reads.
	Overlap bool
	// Plan is the step's skip rule: from what was observed, ActionKeep (skipped: at most
	// a re-check without a guest call) or what it will do, and why.
	Plan func(PlanInput) (action Action, why string)
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
var Steps = []Step{jailStep, egressStep, provisionStep, brokerStep, podmanStep, enrolStep, imageStep, levStep}

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
	// obs is the observation the run started from (StatusAfter reuses it when nothing
	// changed).
	obs *Observed
}

// with returns f with the fields named in gives taken from g.
func (f Facts) with(g Facts, gives []Fact) Facts {
	for _, n := range gives {
		switch n {
		case FactUID:
			f.UID = g.UID
		case FactAliasV4:
			f.AliasV4 = g.AliasV4
		case FactAliasV6:
			f.AliasV6 = g.AliasV6
		case FactStatusSum:
			f.StatusSum = g.StatusSum
		case FactImageRef:
			f.ImageRef = g.ImageRef
		case FactBenchRef:
			f.BenchRef = g.BenchRef
		case FactPodman:
			f.Podman = g.Podman
		case FactBroker:
			f.Broker = g.Broker
		case FactBootSnapshot:
			f.BootSnapshot = g.BootSnapshot
		default:
			panic("bringup: step gives unknown fact " + n.String())
		}
	}
	return f
}

// needs are Steps[i]'s needs for this instance.
func (in *Instance) needs(i int) []Fact {
	n := Steps[i].Needs
	if Steps[i].NeedsFor != nil {
		n = append(append([]Fact(nil), n...), Steps[i].NeedsFor(in)...)
	}
	return n
}

// readyAfter is the index of the last step before Steps[i] that gives one of its needs
// (at least egress's: nothing starts before the firewall is verified).
func (in *Instance) readyAfter(i int) int {
	last := 0
	needs := in.needs(i)
	for k := 0; k < i; k++ {
		if Steps[k].ID == StepEgress && k > last {
			last = k
		}
		for _, g := range Steps[k].Gives {
			for _, n := range needs {
				if g == n && k > last {
					last = k
				}
			}
		}
	}
	return last
}

// run is one step running (in order, or started early beside others).
type run struct {
	done chan struct{}
	d    Done
	err  error
	sr   StepResult
}

// start runs s in a goroutine with its own guest-call counter (its calls still count
// in the instance's total).
func (in *Instance) start(ctx context.Context, s Step, obs Observed, f Facts) *run {
	r := &run{done: make(chan struct{})}
	sub := *in
	sub.Runner = &guest.Counting{Inner: in.Runner}
	go func() {
		defer close(r.done)
		t0 := time.Now()
		r.d, r.err = s.Run(ctx, &sub, obs, f)
		r.sr = StepResult{ID: s.ID, Changed: r.d.Changed, Detail: r.d.Detail, Duration: time.Since(t0), Calls: sub.Runner.Calls()}
	}()
	return r
}

// Execute brings the jail up: one observation, then every step of the table in order
// (an Overlap step started early, beside the steps before it). Progress goes to
// Options.Out, one line per step, in the table's order.
func (in *Instance) Execute(ctx context.Context) (*Result, error) {
	in.mustBePrepared("Execute")
	start := time.Now()
	in.Runner.Reset()
	res := &Result{}
	rebuild := in.Spec.RebuildRequest()
	obs := in.observe(ctx, &rebuild)
	res.obs = &obs
	f := obs.Facts
	if w := in.treeWarning(obs); w != "" && in.opts.Out != nil {
		fmt.Fprintf(in.opts.Out, "warning: %s\n", w)
	}
	p := newProgress(in.opts.Out, len(Steps))
	early := map[int]*run{}
	var install chan struct{}
	// every step started early is waited for, whatever happens before its turn
	defer func() {
		for _, r := range early {
			<-r.done
		}
		if install != nil {
			<-install
		}
	}()
	for i, s := range Steps {
		r := early[i]
		if r == nil || !isDone(r) {
			p.running(i, s.ID)
		}
		if r == nil {
			r = in.start(ctx, s, obs, f)
		}
		<-r.done
		if r.err != nil {
			p.failed(i, s.ID, r.sr.Duration, r.err)
			res.facts = f
			return res, fmt.Errorf("%s: %w", s.ID, r.err)
		}
		p.done(i, r.sr)
		if s.ID == StepEgress && in.helperWanted(obs) {
			// A VM guest without this lever's lev gets it now, beside provisioning (under
			// TCG the 15 MB arrive over ssh at ~8 MB/s), and not earlier: nothing changes
			// in the guest before the egress step has judged its containment and verified
			// the chains (started beside the egress step, the install only moved guest CPU
			// from one step to another: docs/benchmarks-vm.md). It writes one file,
			// checked against lev's digest, and runs nothing of it. Its failure is not
			// this step's: the helper call that needs lev installs it again and says why.
			install = make(chan struct{})
			boot := f.BootSnapshot
			go func() {
				defer close(install)
				if obs.GuestReachable {
					// the observation looked and did not find it
					_ = in.helper.Install(ctx, in.Runner)
					return
				}
				// a guest that was down may have it on its disk (a restart): the call
				// after its boot looked (UpSnapshotter), or a look comes first
				if found, ok := in.helper.Looked(boot); ok {
					if !found {
						_ = in.helper.Install(ctx, in.Runner)
					}
					return
				}
				_ = in.helper.Ensure(ctx, in.Runner)
			}()
		}
		f = f.with(r.d.Facts, s.Gives)
		res.Steps = append(res.Steps, r.sr)
		res.Changed = res.Changed || r.d.Changed
		for j := i + 1; j < len(Steps); j++ {
			if Steps[j].Overlap && early[j] == nil && in.readyAfter(j) <= i {
				early[j] = in.start(ctx, Steps[j], obs, f)
			}
		}
	}
	res.facts = f
	res.GuestCalls = in.Runner.Calls()
	res.Duration = time.Since(start)
	p.summary(in.cfg.Name, res)
	return res, nil
}

func isDone(r *run) bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// helperWanted says whether this run will call a guest helper that lev must be installed
// for: a VM guest (not the netns substrate, where lev runs in place) that the observation
// did not find it installed in, and the enrol step
// about to act or the image step about to act with a tree to make (lev's own, or the
// default workbench: an image alone needs no helper).
func (in *Instance) helperWanted(obs Observed) bool {
	if in.InPlace || in.helper == nil || obs.HelperPresent {
		return false
	}
	for _, p := range in.Plan(obs) {
		if p.Action != ActionKeep && (p.ID == StepEnrol || p.ID == StepImage && in.usesTrees()) {
			return true
		}
	}
	return false
}
