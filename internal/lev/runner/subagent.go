package runner

// Sub-agents: spawn_agent runs a worker child run whose permissions can only be narrower
// than its parent's. planChild is the pure decision (what the child asks for against what
// the calling stage holds); SpawnAgent carries it out: the child is a run of its own
// (runs/<id>/, its own events and gate), driven on the parent's call and answered by
// whoever answers the parent.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// MaxSubAgentDepth: a top-level run is depth 0, its sub-agents 1, theirs 2; none deeper.
const MaxSubAgentDepth = 2

// Refusal codes of a spawn_agent call.
const (
	CodeSubAgentWider = "subagent-wider"
	CodeSubAgentDepth = "subagent-depth"
)

// parentView is what the calling stage holds: planChild's whole input besides the request.
type parentView struct {
	Depth int
	// Tools are the tools offered in the calling stage.
	Tools []string
	// Granted are the parent's granted [read_paths] entries, as declared.
	Granted []string
	// Sandbox is the calling stage's blueprint sandbox (agent and stage overlaid), and
	// Effective that merged with the user's (what the stage's commands run in).
	Sandbox   *sandbox.Config
	Effective sandbox.Config
	// Level is the parent's taint now.
	Level taint.Level
}

// childPlan is what the child gets.
type childPlan struct {
	Depth     int
	Tools     []string
	ReadPaths []string
	Sandbox   *sandbox.Config
	Level     taint.Level
}

// planChild refuses a request wider than the parent in any way, naming what, and otherwise
// says what the child runs with: a subset of the stage's tools (no MCP tool: the child
// starts no servers), of its granted read paths, its sandbox with the network at most as
// open, one level deeper, starting at no less than the parent's taint.
func planChild(p parentView, req pipeline.SubAgentRequest) (*childPlan, *pipeline.Refusal) {
	wider := func(format string, a ...any) *pipeline.Refusal {
		msg := "spawn_agent: refused: " + fmt.Sprintf(format, a...) + "; a sub-agent's permissions can only be narrower than its parent's"
		return &pipeline.Refusal{Step: pipeline.StepExecute, Code: CodeSubAgentWider, Msg: msg}
	}
	plan := &childPlan{Depth: p.Depth + 1, Level: p.Level}
	if plan.Depth > MaxSubAgentDepth {
		return nil, &pipeline.Refusal{Step: pipeline.StepExecute, Code: CodeSubAgentDepth,
			Msg: fmt.Sprintf("spawn_agent: refused: this run is a sub-agent at depth %d; sub-agents go at most %d deep", p.Depth, MaxSubAgentDepth)}
	}
	for _, t := range req.Tools {
		switch {
		case strings.HasPrefix(t, toolnames.MCPPrefix):
			return nil, wider("tool %q is an MCP tool: a sub-agent starts no MCP server, so it is offered built-in tools only", t)
		case !slices.Contains(p.Tools, t):
			return nil, wider("tool %q is not offered to this stage (it has %s)", t, strings.Join(p.Tools, ", "))
		case t == "spawn_agent" && plan.Depth >= MaxSubAgentDepth:
			return nil, &pipeline.Refusal{Step: pipeline.StepExecute, Code: CodeSubAgentDepth,
				Msg: fmt.Sprintf("spawn_agent: refused: the child would run at depth %d, the deepest a sub-agent goes (%d), so it cannot be offered spawn_agent", plan.Depth, MaxSubAgentDepth)}
		}
	}
	plan.Tools = append([]string(nil), req.Tools...)
	for _, rp := range req.ReadPaths {
		if !slices.Contains(p.Granted, rp) {
			held := "none"
			if len(p.Granted) > 0 {
				held = strings.Join(p.Granted, ", ")
			}
			return nil, wider("read path %q is not one this run holds a grant for (it holds: %s)", rp, held)
		}
		if !slices.Contains(plan.ReadPaths, rp) {
			plan.ReadPaths = append(plan.ReadPaths, rp)
		}
	}
	var sb sandbox.Config
	if p.Sandbox != nil {
		sb = *p.Sandbox
	}
	parentNet := p.Effective.Kind == "" || p.Effective.Kind == sandbox.KindNone || p.Effective.NetworkOn()
	if req.Network != nil {
		switch {
		case *req.Network && !parentNet:
			return nil, wider("network = true, but this stage's sandbox (%s) has network = false", p.Effective.Kind)
		case !*req.Network && (p.Effective.Kind == "" || p.Effective.Kind == sandbox.KindNone):
			// Nothing would enforce it: fail closed rather than promise a cut-off network.
			return nil, &pipeline.Refusal{Step: pipeline.StepExecute, Code: CodeSubAgentWider,
				Msg: "spawn_agent: refused: network = false needs a container or namespace sandbox, and this stage runs without one ([sandbox] kind); give the stage a sandbox, or leave network unset"}
		case !*req.Network:
			off := false
			sb.Network = &off
		}
	}
	if p.Sandbox != nil || sb.Network != nil {
		plan.Sandbox = &sb
	}
	if req.Label != "" {
		l, err := taint.ParseLevel(req.Label)
		if err != nil {
			return nil, wider("label: %v", err)
		}
		if l < p.Level {
			return nil, wider("label %s is below this run's taint (%s): a sub-agent starts with at least its parent's", l, p.Level)
		}
		plan.Level = l
	}
	return plan, nil
}

// subAgents is a run's pipeline.SubAgents.
type subAgents struct {
	e      *Engine
	parent *run
}

// view is the parent's side of planChild for the call c.
func (s *subAgents) view(c *pipeline.Call) parentView {
	r := s.parent
	v := parentView{Depth: r.rec.Depth, Tools: c.Stage.Tools, Sandbox: c.Stage.Sandbox, Level: taint.Private}
	for _, st := range r.rec.ReadPaths {
		if st.Granted {
			v.Granted = append(v.Granted, st.Entry)
		}
	}
	var user, bp sandbox.Config
	if r.cfg != nil && r.cfg.Sandbox != nil {
		user = *r.cfg.Sandbox
	}
	if c.Stage.Sandbox != nil {
		bp = *c.Stage.Sandbox
	}
	v.Effective, _ = sandbox.Merge(user, bp)
	// A gate that cannot say its level leaves the child Private: fail closed.
	if g, ok := r.pipe.Gate.(interface{ Level() taint.Level }); ok {
		v.Level = g.Level()
	}
	return v
}

// SpawnAgent runs the child for a spawn_agent call and returns its result, labelled with
// the child run's label.
func (s *subAgents) SpawnAgent(ctx context.Context, c *pipeline.Call, req pipeline.SubAgentRequest) (*pipeline.Result, error) {
	e, parent := s.e, s.parent
	plan, ref := planChild(s.view(c), req)
	if ref != nil {
		return &pipeline.Result{Content: ref.Msg, IsError: true, Refusal: ref}, nil
	}
	maxTurns := 20
	if c.Stage.Index < len(parent.bp.Order) {
		maxTurns = parent.bp.Order[c.Stage.Index].MaxTurns
	}
	if parent.rec.Admission == nil {
		return nil, fmt.Errorf("spawn_agent: run %s has no blueprint snapshot to narrow", parent.rec.ID)
	}
	adm := *parent.rec.Admission
	adm.ResumeConfigs = nil
	rec := &Record{ID: NewID(), Agent: parent.rec.Agent, Blueprint: parent.rec.Blueprint, Version: parent.rec.Version, Workdir: parent.rec.Workdir, Input: req.Task,
		Yolo: parent.rec.Yolo, Allow: parent.rec.Allow, Parent: parent.rec.ID, Depth: plan.Depth,
		Status: StatusRunning, Created: time.Now().UTC(), Admission: &adm}
	narrow := func(bp *blueprint.Blueprint) (*blueprint.Blueprint, error) {
		nb := *bp
		st := &blueprint.Stage{Name: "worker", Prompt: "You are a worker sub-agent of run " + parent.rec.ID + ". Do the task below and give your result as your final answer.",
			Tools: plan.Tools, MaxTurns: maxTurns}
		nb.Order, nb.Stages = []*blueprint.Stage{st}, map[string]*blueprint.Stage{st.Name: st}
		nb.Seeds, nb.MCP = nil, blueprint.MCPDecl{}
		nb.Declared = nil
		for _, d := range bp.Declared {
			if slices.Contains(plan.ReadPaths, d.Raw) {
				nb.Declared = append(nb.Declared, d)
			}
		}
		nb.Sandbox = plan.Sandbox
		return &nb, nil
	}
	r, err := e.prepareWith(rec, false, prepOpts{cfg: parent.cfg, narrow: narrow, asker: parent.pipe.Asker})
	if err != nil {
		return nil, fmt.Errorf("spawn_agent: preparing the sub-agent: %w", err)
	}
	for _, st := range rec.ReadPaths {
		if !st.Granted {
			pipeline.Close(r.exec)
			return pipeline.Refused(pipeline.StepExecute, CodeSubAgentWider, fmt.Sprintf("spawn_agent: refused: read path %q is not granted to the sub-agent", st.Entry)), nil
		}
	}
	g, ok := r.pipe.Gate.(interface {
		AddInput(stage int, l taint.Level, origin string)
	})
	if !ok {
		pipeline.Close(r.exec)
		return nil, fmt.Errorf("spawn_agent: the sub-agent's taint gate cannot take its parent's taint; not started")
	}
	// The child starts where its parent is: nothing it was told is less sensitive than
	// the context it was told from.
	g.AddInput(0, plan.Level, "parent run "+parent.rec.ID+" (spawn_agent "+c.ID+")")
	if err := e.labelRun(r); err != nil {
		pipeline.Close(r.exec)
		return nil, fmt.Errorf("spawn_agent: %w", err)
	}
	rec.Stages = []StageRecord{{Name: "worker", Status: StatusPending}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	e.mu.Lock()
	l := e.entry(rec.ID)
	l.cancel, l.done = cancel, done
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		l.cancel = nil
		if l.done == done {
			l.done = nil
		}
		e.tidy(rec.ID)
		e.mu.Unlock()
		close(done)
	}()
	defer pipeline.Close(r.exec)
	if err := e.Store.Save(rec); err != nil {
		return nil, fmt.Errorf("spawn_agent: recording the sub-agent: %w", err)
	}
	if err := e.startEvents(r, fmt.Sprintf("spawned by run %s (spawn_agent %s, depth %d)", parent.rec.ID, c.ID, plan.Depth)); err != nil {
		rec.Status, rec.Error = StatusFailed, err.Error()
		e.saveEnd(rec)
		return nil, fmt.Errorf("spawn_agent: %w", err)
	}
	e.drive(ctx, r)
	e.closeEvents(r)
	res := &pipeline.Result{Label: rec.Label}
	if rec.Label == "" {
		res.Label = taint.Private.String()
	}
	if rec.Status == StatusCompleted {
		res.Content = fmt.Sprintf("sub-agent run %s completed (label %s); its output:\n%s", rec.ID, res.Label, rec.Result)
	} else {
		res.Content = fmt.Sprintf("sub-agent run %s %s: %s", rec.ID, rec.Status, rec.Error)
		res.IsError = true
	}
	return res, nil
}
