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
package taintgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/policy"
	"github.com/lever-jail/lever/internal/lev/readpaths"
	"github.com/lever-jail/lever/internal/lev/taint"
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

	mu      sync.Mutex
	ctx     *taint.Context
	stage   int
	byCall  map[string]taint.EntryID
	started bool
}

// New builds the gate for a run from its environment.
func New(env *pipeline.RunEnv) (*Gate, error) {
	g := &Gate{env: env, enabled: true, byCall: map[string]taint.EntryID{}, ctx: taint.NewContext()}
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
	if !g.enabled {
		return g, nil
	}
	// The same resolution `lev policy` uses ($LEV_POLICY, [security] policy_file, default).
	polFile, err := policy.Resolve(env.Config)
	if err != nil {
		return nil, err
	}
	pol, err := policy.Load(polFile)
	if err != nil {
		return nil, err
	}
	if pol, err = apply(pol, user, false); err != nil {
		return nil, fmt.Errorf("config.toml [taint_tracking]: %w", err)
	}
	if pol, err = apply(pol, bp, true); err != nil {
		return nil, fmt.Errorf("blueprint [taint_tracking]: %w", err)
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
	if env.Blueprint != nil && env.Config != nil {
		for _, st := range readpaths.Resolve(env.Blueprint.Name, env.Blueprint.Declared, env.Config.Grants) {
			if st.Granted {
				g.hasGrant = true
			}
		}
	}
	g.state = filepath.Join(env.RunDir, "taint_state.json")
	if err := g.load(); err != nil {
		return nil, err
	}
	if !g.started {
		// The first stage's opening message: the task, and the seeds, which for an agent
		// holding a grant may have come through it.
		l := taint.Internal
		if g.hasGrant && env.Blueprint != nil && len(env.Blueprint.Seeds) > 0 {
			l = taint.Private
		}
		g.ctx.Add(region(0), l, "stage 0 input (task and seeds)")
		g.started = true
	}
	return g, nil
}

func apply(p *policy.Policy, t *blueprint.TaintTracking, tighten bool) (*policy.Policy, error) {
	return p.ApplyTaintTracking(t, tighten)
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
	g.stage = n
	g.ctx.Add(region(n), carried, fmt.Sprintf("stage %d input (previous stage's output)", n))
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

// Check is pipeline step 4.
func (g *Gate) Check(ctx context.Context, c *pipeline.Call) (pipeline.Decision, error) {
	if !g.enabled {
		return pipeline.Decision{Allow: true, Source: "TaintTrackingOff"}, nil
	}
	g.mu.Lock()
	g.enter(c.Stage.Index)
	level := g.ctx.Level()
	g.save()
	g.mu.Unlock()
	out, err := g.gate.Check(ctx, taint.Call{Tool: c.Tool, Target: Target(c), Taint: level, Stage: c.Stage.Index, CallID: c.ID})
	if err != nil {
		return pipeline.Decision{Allow: false, Reason: err.Error(), Source: "AuditError"}, nil
	}
	return pipeline.Decision{Allow: out.Allowed, Reason: out.Reason, Source: string(out.Source)}, nil
}

// Observe labels a finished call's result as it enters the conversation.
func (g *Gate) Observe(_ context.Context, c *pipeline.Call, r *pipeline.Result) {
	if !g.enabled || r == nil || r.Refusal != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.enter(c.Stage.Index)
	l := taint.ResultLevel(c.Tool, taint.ResultInfo{ThroughGrant: c.Private(), AgentHasGrant: g.hasGrant})
	g.byCall[c.ID] = g.ctx.Add(region(c.Stage.Index), l, c.Tool+" "+c.ID)
	g.save()
}

// Target is what the policy matches: the URL's host for the web and HTTP tools, the
// command line for shell, "result" for submit_output. It is read from the call's decoded
// arguments (the value the tool itself runs with), never by parsing the raw JSON again.
func Target(c *pipeline.Call) string {
	return taint.Target(c.Tool, c.PolicyArgs())
}

type asker struct{ a pipeline.Asker }

func (a asker) Ask(ctx context.Context, p taint.Prompt) (taint.Answer, error) {
	q := pipeline.Question{Tool: p.Tool, Reason: "taint gate: " + p.Reason + "; allow once, allow for this session, or deny?"}
	if ga, ok := a.a.(GateAsker); ok {
		return ga.AskGate(ctx, q)
	}
	ok, err := a.a.Ask(ctx, q)
	if err != nil || !ok {
		return taint.AnswerDeny, err
	}
	return taint.AnswerOnce, nil
}

type stateFile struct {
	Stage   int                      `json:"stage"`
	Entries []taint.Entry            `json:"entries"`
	Calls   map[string]taint.EntryID `json:"calls"`
}

// save persists the live labels so a resumed run (which reloads the conversation) also
// reloads its taint. Called with g.mu held.
func (g *Gate) save() {
	if g.state == "" {
		return
	}
	b, _ := json.Marshal(stateFile{Stage: g.stage, Entries: g.ctx.Live(), Calls: g.byCall})
	tmp := g.state + ".tmp"
	os.MkdirAll(filepath.Dir(g.state), 0o700)
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, g.state)
	}
}

func (g *Gate) load() error {
	b, err := os.ReadFile(g.state)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading taint state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("reading taint state %s: %w", g.state, err)
	}
	g.stage = st.Stage
	old := map[taint.EntryID]string{}
	for k, v := range st.Calls {
		old[v] = k
	}
	for _, e := range st.Entries {
		id := g.ctx.Add(e.Region, e.Level, e.Origin)
		if call, ok := old[e.ID]; ok {
			g.byCall[call] = id
		}
	}
	g.started = true
	return nil
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
