// Package taintgate plugs the taint gate into lev's tool pipeline (step 4, and the
// observe step after execution). lev serve passes Factory to the run engine explicitly;
// nothing registers itself.
//
// Labels come from the runtime only: a tool result entering the conversation is labelled
// by what the runtime knows about it (read through a grant: Private; web: Public; else
// Internal), never from anything the model wrote. The context's level (the max of the live
// entries) is compared with each outbound tool's clearance before it fires; the policy
// (the user's policy file, config.toml's and the blueprint's [taint_tracking]) decides
// what happens above it, and every decision lands in stages/<n>/taint_audit.json.
//
// It owns the per-run gate state and its audit file. It must not label a result from its
// content, only from where the runtime got it.
package taintgate

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/policy"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/taint/labels"
)

// Factory is the engine's GateFactory: one gate per run.
func Factory(env *pipeline.RunEnv) (pipeline.Gate, error) {
	g, err := New(env)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return g, nil
}

// GateAsker is an Asker that can give the gate's three answers (allow once, allow for the
// session, deny). A plain pipeline.Asker's yes is "allow once".
type GateAsker interface {
	AskGate(ctx context.Context, q pipeline.Question) (taint.Answer, error)
}

// Gate is one run's taint gate.
type Gate struct {
	env      *pipeline.RunEnv
	enabled  bool
	hasGrant bool
	gate     *taint.Gate
	state    string // runs/<id>/taint_state.json: the live labels, for lev resume

	mu     sync.Mutex
	ctx    *taint.Context
	stage  int
	byCall map[string]taint.EntryID
	// byTurn are the entries of the stage's model turns, by the runner's message id: a
	// turn the model wrote after seeing an entry may quote it, so it carries the label
	// the context had when the model wrote it, and dropping the entry alone lowers
	// nothing while such a turn is still in the conversation.
	byTurn  map[string]taint.EntryID
	started bool
	// todo is the label of the run's todo list: the context's label when todo_write last
	// replaced it. todo_read's result carries it back, so moving data into the list and
	// dropping its source launders nothing.
	todo taint.Level
	// high is the highest level the context ever had: the label of the run's records,
	// which keep what eviction dropped from the context.
	high taint.Level
	// err is the first failure to write taint_state.json; the run stops on it.
	err error
	// began is the workdir as it was before each call that can write anywhere in it
	// (shell, a stdio MCP server) ran: what changed since takes the context's label.
	began map[string]*labels.Snapshot
}

// New builds the gate for a run from its environment.
func New(env *pipeline.RunEnv) (*Gate, error) {
	g := &Gate{env: env, enabled: true, byCall: map[string]taint.EntryID{}, byTurn: map[string]taint.EntryID{}, ctx: taint.NewContext()}
	var user, bp *blueprint.TaintTracking
	if env.Config != nil {
		user = env.Config.TaintTracking
	}
	if env.Blueprint != nil {
		bp = env.Blueprint.TaintTracking
	}
	// On unless the user turned it off; a blueprint may turn it on, never off.
	if user != nil && user.Enabled != nil && !*user.Enabled {
		g.enabled = bp != nil && bp.Enabled != nil && *bp.Enabled
	}
	// Labels are tracked even with the gate off: what this run stores (its records, the
	// files it writes) keeps its label for the runs that read it later.
	if err := g.track(); err != nil {
		return nil, err
	}
	if !g.enabled {
		return g, nil
	}
	// The same resolution `lev policy` uses ($LEV_POLICY, [security] policy_file, default),
	// and the same constructor `lev policy test` uses (config.toml's [taint_tracking] and
	// MCP classification, then the blueprint's), so the dry run cannot disagree with this.
	polFile, err := policy.Resolve(env.Config)
	if err != nil {
		return nil, err
	}
	pol, err := policy.Live(polFile, env.Config, bp)
	if err != nil {
		return nil, err
	}
	mode := taint.Interactive
	switch {
	case env.Yolo:
		mode = taint.Yolo
	case env.Asker == nil:
		mode = taint.Headless
	}
	g.gate = &taint.Gate{Table: pol.Table(), Policy: pol, Mode: mode, Audit: taint.NewFileAudit(env.RunDir)}
	if env.Asker != nil {
		g.gate.Asker = asker{env.Asker}
	}
	return g, nil
}

// track loads or starts the run's labelled context.
func (g *Gate) track() error {
	env := g.env
	if env.Blueprint != nil && env.Config != nil {
		for _, st := range pipeline.ResolveGrants(env.Blueprint, env.Config) {
			if st.Granted {
				g.hasGrant = true
			}
		}
	}
	if env.RunDir != "" {
		g.state = filepath.Join(env.RunDir, "taint_state.json")
	}
	if err := g.load(); err != nil {
		return err
	}
	if !g.started {
		// The first stage's opening message: the task, and the seeds, which for an agent
		// holding a grant may have come through it.
		l := taint.Internal
		if g.hasGrant && env.Blueprint != nil && len(env.Blueprint.Seeds) > 0 {
			l = taint.Private
		}
		g.add(region(0), l, "stage 0 input (task and seeds)")
		g.started = true
	}
	return nil
}

// add puts an entry in the context and keeps the high-water mark. Called with g.mu held
// (or before the gate is shared).
func (g *Gate) add(region string, l taint.Level, origin string) taint.EntryID {
	id := g.ctx.Add(region, l, origin)
	g.high = taint.Max(g.high, g.ctx.Level())
	return id
}

// HighWater is the highest label the run's context ever had: the label of everything the
// run records (its conversation keeps what eviction dropped from the context).
func (g *Gate) HighWater() taint.Level {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.high
}

// AddInput labels data the runtime put into stage n's first message after the gate was
// built (a seed read from a labelled file).
func (g *Gate) AddInput(stage int, l taint.Level, origin string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.add(region(stage), l, origin)
	g.save()
}

// Err is the first failure to record the run's taint state.
func (g *Gate) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

func region(stage int) string { return fmt.Sprintf("stage/%d", stage) }

// enter moves the gate to stage n. The engine starts each stage with a fresh conversation
// holding the previous stage's output, so the old stage's entries are evicted and one entry
// carrying their level (the output may quote any of them) takes their place.
func (g *Gate) enter(n int) {
	if n == g.stage {
		return
	}
	carried := g.ctx.RegionLevel(region(g.stage))
	g.ctx.EvictRegion(region(g.stage))
	g.byCall = map[string]taint.EntryID{}
	g.byTurn = map[string]taint.EntryID{}
	g.stage = n
	g.add(region(n), carried, fmt.Sprintf("stage %d input (previous stage's output)", n))
}

// Level is the run's current taint.
func (g *Gate) Level() taint.Level {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctx.Level()
}

// Evict drops the entry a tool call's result added, for an engine that removes that
// result from the conversation (compaction, a sliding window). The taint falls back to the
// max of what is still live.
func (g *Gate) Evict(callID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	id, ok := g.byCall[callID]
	if !ok {
		return false
	}
	delete(g.byCall, callID)
	ok = g.ctx.Evict(id)
	g.save()
	return ok
}

// ObserveTurn labels a model turn of stage's conversation (key: the runner's id for its
// message) with the label of what the model saw when it wrote it; public: the runtime
// knows the turn holds nothing the model saw (no text, only context tool calls, whose
// arguments are runtime-assigned ids).
func (g *Gate) ObserveTurn(stage int, key string, public bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.enter(stage)
	l := g.ctx.Level()
	if public {
		l = taint.Public
	}
	g.byTurn[key] = g.add(region(stage), l, "model turn "+key)
	g.save()
}

// EvictTurn drops a model turn's entry (the runner dropped the turn from the
// conversation).
func (g *Gate) EvictTurn(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	id, ok := g.byTurn[key]
	if !ok {
		return false
	}
	delete(g.byTurn, key)
	ok = g.ctx.Evict(id)
	g.save()
	return ok
}

// EntryLevel is the label of a live entry of the running stage: a call's result (by call
// id) or, with turn, a model turn (by the runner's message id).
func (g *Gate) EntryLevel(key string, turn bool) (taint.Level, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.byCall
	if turn {
		m = g.byTurn
	}
	id, ok := m[key]
	if !ok {
		return 0, false
	}
	for _, e := range g.ctx.Live() {
		if e.ID == id {
			return e.Level, true
		}
	}
	return 0, false
}

// InputLevel is the label of the running stage's input (its first message).
func (g *Gate) InputLevel(stage int) taint.Level {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.enter(stage)
	l := taint.Public
	for _, e := range g.ctx.Live() {
		if e.Region == region(stage) && strings.HasPrefix(e.Origin, fmt.Sprintf("stage %d input", stage)) {
			l = taint.Max(l, e.Level)
		}
	}
	return l
}

// Check is pipeline step 4.
func (g *Gate) Check(ctx context.Context, c *pipeline.Call) (pipeline.Decision, error) {
	return g.check(ctx, c, false)
}

// CheckUnasked decides c as Check does, but puts nobody to a prompt: an ask blocks as in
// headless mode. The engine uses it for a run's error text, decided as the run ends.
func (g *Gate) CheckUnasked(ctx context.Context, c *pipeline.Call) (pipeline.Decision, error) {
	return g.check(ctx, c, true)
}

func (g *Gate) check(ctx context.Context, c *pipeline.Call, noAsk bool) (pipeline.Decision, error) {
	g.mu.Lock()
	g.enter(c.Stage.Index)
	level := g.ctx.Level()
	g.save()
	g.mu.Unlock()
	// A file the call writes takes the label of what the context holds now, stamped
	// before the write so a crash cannot leave it unlabelled.
	if g.env.Labels != nil {
		for _, w := range c.Writes {
			if err := g.env.Labels.BeforeWrite(w.Real, level); err != nil {
				return pipeline.Decision{Allow: false, Reason: err.Error(), Source: "LabelStoreError"}, nil
			}
		}
	}
	g.noteStart(c)
	if !g.enabled {
		return pipeline.Decision{Allow: true, Source: "TaintTrackingOff"}, nil
	}
	target, unclear := Target(c)
	out, err := g.gate.Check(ctx, taint.Call{Tool: c.Tool, Target: target, TargetUnclear: unclear, Taint: level,
		Stage: c.Stage.Index, CallID: c.ID, Args: c.ArgsJSON, NoAsk: noAsk})
	if err != nil && noAsk && out.Source == taint.SourceWithinClearance {
		// A run's error text within clearance needs no decision to leave; the audit that
		// failed is usually what the run failed on, and the error must say so.
		return pipeline.Decision{Allow: true, Reason: "within clearance (unaudited: " + err.Error() + ")", Source: string(out.Source)}, nil
	}
	if err != nil {
		return pipeline.Decision{Allow: false, Reason: err.Error(), Source: "AuditError"}, nil
	}
	d := pipeline.Decision{Allow: out.Allowed, Reason: out.Reason, Source: string(out.Source)}
	if n := len(out.Records); n > 0 {
		d.Taint, d.Clearance = out.Records[n-1].Taint.String(), out.Records[n-1].Clearance.String()
	}
	return d, nil
}

func (g *Gate) logf(format string, args ...any) {
	if g.env.Log != nil {
		g.env.Log(format, args...)
	}
}

// Target is what the policy matches: the URL's host for the web and HTTP tools, the
// command line for shell, "result" for submit_output, and why it is unclear when lev
// cannot read it unambiguously (taint.Target). It is read from the call's decoded
// arguments (the value the tool itself runs with), never by parsing the raw JSON again.
func Target(c *pipeline.Call) (target, unclear string) {
	return taint.Target(c.Tool, c.PolicyArgs())
}

type asker struct{ a pipeline.Asker }

func (a asker) Ask(ctx context.Context, p taint.Prompt) (taint.Answer, error) {
	// The person must be able to tell the endpoint they expect from another one: the
	// question carries the call's arguments and names its target, and says how far an
	// answer for the session reaches (the gate keys it on tool and target).
	q := pipeline.Question{Tool: p.Tool, Args: p.Args, Reason: gateQuestion(p)}
	if ga, ok := a.a.(GateAsker); ok {
		return ga.AskGate(ctx, q)
	}
	ok, err := a.a.Ask(ctx, q)
	if err != nil || !ok {
		return taint.AnswerDeny, err
	}
	return taint.AnswerOnce, nil
}

// gateQuestion is the text of the taint gate's prompt.
func gateQuestion(p taint.Prompt) string {
	to := fmt.Sprintf("to target %q", p.Target)
	session := fmt.Sprintf("%s to %q only", p.Tool, p.Target)
	switch {
	case p.TargetUnclear != "":
		// %q escapes the tab or newline that makes it unclear, so the person sees it; the
		// reason says why it is unclear.
		to = fmt.Sprintf("to the unclear target %q", p.Target)
		session = fmt.Sprintf("%s with exactly this target only", p.Tool)
	case p.Target == "":
		to = "naming no target"
		session = fmt.Sprintf("every %s call that names no target", p.Tool)
	}
	return fmt.Sprintf("taint gate: %s %s: %s; allow once, allow for this session (%s), or deny?", p.Tool, to, p.Reason, session)
}

var _ pipeline.Gate = (*Gate)(nil)

// describe is used in logs.
func (g *Gate) String() string {
	if !g.enabled {
		return "taint gate: off"
	}
	return "taint gate: " + strings.ToLower(g.gate.Mode.String())
}

func (g *Gate) bp() *blueprint.Blueprint { return g.env.Blueprint }

func (g *Gate) cfg() *levconfig.Config { return g.env.Config }
