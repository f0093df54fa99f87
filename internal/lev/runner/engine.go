package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/mcp"
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/taint/labels"
	"github.com/lever-jail/lever/internal/lev/toolnames"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// Spec asks for a run.
type Spec struct {
	Agent   string   `json:"agent"`
	Workdir string   `json:"workdir"`
	Yolo    bool     `json:"yolo,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Input   string   `json:"input,omitempty"`
	// Interactive runs put ask prompts in their record and wait for POST .../answer;
	// otherwise nobody is there to ask and ask is a refusal.
	Interactive bool `json:"interactive,omitempty"`
}

// Engine spawns and drives runs.
type Engine struct {
	Store     *Store
	AgentsDir string
	// Config returns the config in force (the daemon's watcher reloads it on change).
	Config func() *levconfig.Config
	// NewProvider builds the model client; default provider.New.
	NewProvider func(levconfig.Provider) (provider.Provider, error)
	// Home is the real home "~/" read-path entries resolve against.
	Home  string
	Asker pipeline.Asker
	Log   func(format string, args ...any)
	// Secrets are values no tool's environment may carry under any name (the daemon's
	// bearer token).
	Secrets []string
	// Labels keeps the taint labels of run records and of files the file tools write, in
	// lev's state; nil: <runs dir>/../taint-labels.json (see LabelStore).
	Labels *labels.Store
	// NewGate and NewExecutor build each run's taint gate and shell executor. Both are
	// required: there is no pass-through gate and no host fallback to drop into when
	// one is missing, so an engine without them refuses to start (Validate).
	NewGate     pipeline.GateFactory
	NewExecutor pipeline.ExecutorFactory

	wg sync.WaitGroup
	mu sync.Mutex
	// runs is the state of every run the engine drives (or has claimed for a resume),
	// one struct per run, all of it under mu.
	runs map[string]*live
}

// live is one run's state while the engine holds it.
type live struct {
	// cancel stops the run's goroutine; set while it is active (a resume's claim sets a
	// no-op until the goroutine starts).
	cancel context.CancelFunc
	// asker takes POST .../answer for an interactive run.
	asker *apiAsker
	// done is closed when the run's goroutine has fully let go of it: its final status is
	// saved a moment before it stops being active, and a resume in that moment must wait.
	done chan struct{}
	// log is the open events log of the leg being driven.
	log *events.Log
}

// entry returns id's live state, creating it. Called with mu held.
func (e *Engine) entry(id string) *live {
	if e.runs == nil {
		e.runs = map[string]*live{}
	}
	l := e.runs[id]
	if l == nil {
		l = &live{}
		e.runs[id] = l
	}
	return l
}

// tidy forgets id once nothing of it is live. Called with mu held.
func (e *Engine) tidy(id string) {
	if l := e.runs[id]; l != nil && l.cancel == nil && l.asker == nil && l.done == nil && l.log == nil {
		delete(e.runs, id)
	}
}

// busy reports whether id is active. Called with mu held.
func (e *Engine) busy(id string) bool {
	l := e.runs[id]
	return l != nil && l.cancel != nil
}

// release drops a resume's claim on id. Called with mu held.
func (e *Engine) release(id string) {
	if l := e.runs[id]; l != nil {
		l.cancel = nil
		e.tidy(id)
	}
}

// Validate reports what the engine lacks to run anything safely.
func (e *Engine) Validate() error {
	switch {
	case e.NewGate == nil:
		return errors.New("refusing to start: no taint gate is wired into this lev (Engine.NewGate is nil)")
	case e.NewExecutor == nil:
		return errors.New("refusing to start: no sandbox executor is wired into this lev (Engine.NewExecutor is nil)")
	}
	return nil
}

func (e *Engine) logf(format string, args ...any) {
	if e.Log != nil {
		e.Log(format, args...)
	}
}

// run is one spawned run's live state.
type run struct {
	rec   *Record
	bp    *blueprint.Blueprint
	cfg   *levconfig.Config
	pipe  *pipeline.Pipeline
	prov  provider.Provider
	model string
	exec  pipeline.Executor
	seeds string
	asker *apiAsker
	// ev is this leg's events log (events.jsonl); nil until the run exists.
	ev       *events.Log
	evWarned bool
}

// Start checks and spawns a run, returning once it is running (or failed to spawn).
func (e *Engine) Start(ctx context.Context, spec Spec) (*Record, error) {
	if spec.Workdir == "" {
		return nil, errors.New("workdir is required")
	}
	if !filepath.IsAbs(spec.Workdir) {
		// Relative to what? The daemon's directory is not the caller's.
		return nil, fmt.Errorf("workdir %q must be an absolute path", spec.Workdir)
	}
	for _, t := range spec.Allow {
		// --allow shel would lift nothing while the caller believes shell is allowed.
		if err := toolnames.Check(t); err != nil {
			return nil, fmt.Errorf("allow %q: %w", t, err)
		}
	}
	rec := &Record{ID: NewID(), Agent: spec.Agent, Workdir: spec.Workdir, Input: spec.Input,
		Yolo: spec.Yolo, Allow: spec.Allow, Interactive: spec.Interactive, Status: StatusRunning, Created: time.Now().UTC()}
	r, err := e.prepare(rec, false)
	if err != nil {
		return nil, err
	}
	if err := e.seed(ctx, r); err != nil {
		pipeline.Close(r.exec)
		// The run never existed: drop the seed calls' trail, keep the refusal in the log.
		os.RemoveAll(e.Store.RunDir(rec.ID))
		e.logf("%s: %v", rec.Agent, err)
		return nil, err
	}
	e.labelSeeds(r)
	if err := e.labelRun(r); err != nil {
		pipeline.Close(r.exec)
		return nil, err
	}
	for _, st := range r.bp.Order {
		rec.Stages = append(rec.Stages, StageRecord{Name: st.Name, Status: StatusPending})
	}
	if err := e.Store.Save(rec); err != nil {
		pipeline.Close(r.exec)
		return nil, fmt.Errorf("recording run: %w", err)
	}
	if err := e.startEvents(r, "spawned"); err != nil {
		pipeline.Close(r.exec)
		rec.Status, rec.Error = StatusFailed, err.Error()
		e.Store.Save(rec)
		return nil, err
	}
	snap := rec.snapshot()
	e.spawn(r)
	return snap, nil
}

// snapshot copies a record before its run goroutine starts changing it.
func (r *Record) snapshot() *Record {
	c := *r
	c.Stages = append([]StageRecord(nil), r.Stages...)
	c.Seeds = append([]SeedRecord(nil), r.Seeds...)
	c.Allow = append([]string(nil), r.Allow...)
	c.ReadPaths = append([]ReadPathStatus(nil), r.ReadPaths...)
	return &c
}

// Recover marks runs a previous daemon left "running" as failed, so lev ps tells the truth
// and lev resume can pick them up.
func (e *Engine) Recover() {
	recs, err := e.Store.List()
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.Status == StatusRunning {
			r.Status, r.Error = StatusFailed, "interrupted: the daemon stopped during the run (lev resume continues it)"
			if err := e.Store.Save(r); err != nil {
				e.logf("run %s: marking it failed: %v", r.ID, err)
			}
			// Its stream ends too: a follower of it must not wait for an end that never comes.
			if l, err := events.Open(e.Store.EventsPath(r.ID), r.ID); err != nil {
				e.logf("run %s: %v", r.ID, err)
			} else {
				l.Emit(events.Event{Type: events.RunEnd, Status: events.Status(StatusFailed), Error: r.Error})
				if err := l.Close(); err != nil {
					e.logf("run %s: %v", r.ID, err)
				}
			}
		}
	}
}

// Resume continues a run that is not completed, with the config in force now: a grant
// added since the refusal applies to the refused call, which runs first. interactive says
// whether somebody answers its prompts from now on (the one who spawned it may be gone).
func (e *Engine) Resume(ctx context.Context, id string, interactive bool) (*Record, error) {
	rec, err := e.Store.Load(id)
	if err != nil {
		return nil, err
	}
	if rec.Status == StatusCompleted {
		return nil, fmt.Errorf("run %s is completed; nothing to resume", id)
	}
	rec.Interactive = interactive
	// Claim the run before preparing it, so two resumes cannot both drive it.
	e.mu.Lock()
	if e.busy(id) && rec.Status != StatusRunning {
		// Its goroutine saved the final status and is finishing: wait for it.
		if ch := e.runs[id].done; ch != nil {
			e.mu.Unlock()
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			e.mu.Lock()
		}
	}
	if e.busy(id) {
		e.mu.Unlock()
		return nil, fmt.Errorf("run %s is still running", id)
	}
	e.entry(id).cancel = func() {}
	e.mu.Unlock()
	r, err := e.prepare(rec, true)
	if err != nil {
		e.mu.Lock()
		e.release(id)
		e.mu.Unlock()
		return nil, err
	}
	rec.Status, rec.Error, rec.Refusal = StatusRunning, "", nil
	rec.Resumes++
	err = e.Store.Save(rec)
	if err == nil {
		if err = e.startEvents(r, fmt.Sprintf("resumed (%d)", rec.Resumes)); err != nil {
			// Saved as running a moment ago: say what stopped it, so it is not left
			// "running" with nobody driving it.
			rec.Status, rec.Error = StatusFailed, "resume: "+err.Error()
			if serr := e.Store.Save(rec); serr != nil {
				e.logf("run %s: %v; AND ITS RECORD COULD NOT BE WRITTEN: %v", id, err, serr)
			}
		}
	}
	if err != nil {
		pipeline.Close(r.exec)
		e.mu.Lock()
		e.release(id)
		e.mu.Unlock()
		return nil, err
	}
	snap := rec.snapshot()
	e.spawn(r)
	return snap, nil
}

// prepare loads the blueprint (a resumed run's from the snapshot in its record) and
// config and builds the pipeline: everything that can fail before the run starts.
func (e *Engine) prepare(rec *Record, resume bool) (*run, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	cfg := e.Config()
	if resume && rec.Admission == nil {
		return nil, fmt.Errorf("run %s has no blueprint snapshot (recorded by an older lev): it cannot be resumed from what it was admitted under; start a new run", rec.ID)
	}
	bp, file, err := e.loadBlueprint(rec)
	if err != nil {
		return nil, err
	}
	state, err := e.protected(cfg, file, rec.Workdir)
	if err != nil {
		return nil, fmt.Errorf("lev's own state: %w", err)
	}
	// Grants go by the name the file is installed under, never the name it gives itself;
	// rec.Agent stays what the run was asked for, so a resume finds the same file. A
	// blueprint from the tree has no install name at all.
	if !bp.Foreign {
		if err := blueprint.Install(e.AgentsDir, bp); err != nil {
			return nil, err
		}
	}
	rec.Blueprint, rec.Version = file, bp.Version
	fsys, sts, err := pipeline.BuildFS(bp, cfg, rec.Workdir, e.Home)
	if err != nil {
		return nil, err
	}
	if resume && fsys.Workdir != rec.Workdir {
		// The record holds the workdir's real path at admission. A shell command can make
		// a directory above it a symlink, so the same path now names a directory holding
		// more (the whole home): the fence would widen on resume.
		return nil, fmt.Errorf("run %s: its workdir %s now resolves to %s; a run resumes only in the directory it was admitted in", rec.ID, rec.Workdir, fsys.Workdir)
	}
	rec.ReadPaths = nil
	for _, st := range sts {
		rec.ReadPaths = append(rec.ReadPaths, ReadPathStatus{Entry: st.Entry.Raw, Granted: st.Granted, By: st.By})
	}
	if what, ok := state.Covers(fsys.Workdir); ok {
		return nil, fmt.Errorf("workdir %s lies in lev's own state (%s): no run works there, its tools would reach lev's config, token or records", fsys.Workdir, what)
	}
	// lev's state inside the workdir (a jail tree holding $LEV_HOME) stays: every file
	// tool refuses it and every shell command runs with it masked.
	fsys.Protect = state
	if h := configHash(cfg); !resume {
		rec.Admission.ConfigSHA256 = h
	} else {
		rec.Admission.ResumeConfigs = append(rec.Admission.ResumeConfigs, h)
	}
	rec.Workdir = fsys.Workdir
	allow := map[string]bool{}
	for _, t := range rec.Allow {
		allow[t] = true
	}
	var ask pipeline.Asker = e.Asker
	var api *apiAsker
	if rec.Interactive {
		api = &apiAsker{e: e, rec: rec, ch: make(chan string, 1)}
		ask = api
	}
	env := &pipeline.RunEnv{RunID: rec.ID, Agent: bp.Name, Workdir: fsys.Workdir, RunDir: e.Store.RunDir(rec.ID),
		Blueprint: bp, Config: cfg, Yolo: rec.Yolo, Asker: ask, Log: e.Log, Labels: e.LabelStore()}
	gate, err := e.NewGate(env)
	if err != nil {
		return nil, fmt.Errorf("taint gate: %w", err)
	}
	if gate == nil {
		return nil, errors.New("taint gate: the factory returned no gate")
	}
	inner, err := e.NewExecutor(env)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if inner == nil {
		return nil, errors.New("sandbox: the factory returned no executor")
	}
	exec := &maskExec{inner: inner, mask: state.Paths()}
	newProv := e.NewProvider
	if newProv == nil {
		newProv = provider.New
	}
	prov, err := newProv(cfg.Provider)
	if err != nil {
		pipeline.Close(exec)
		return nil, err
	}
	httpc, err := provider.NewHTTPClient(provider.TLSFiles{}, 60*time.Second)
	if err != nil {
		pipeline.Close(exec)
		return nil, err
	}
	model := bp.Model
	if model == "" {
		model = cfg.Provider.Model
	}
	// The MCP servers the blueprint declares and the config grants; a stdio one runs in
	// the run's sandbox (the agent's [sandbox]) with lev's state masked.
	runDir := e.Store.RunDir(rec.ID)
	exec.mcp = mcprun.Start(context.Background(), mcprun.Env{Config: cfg, Blueprint: bp, Workdir: fsys.Workdir, Exec: exec,
		Stage: pipeline.Stage{Name: "mcp", Sandbox: mergeSandbox(bp.Sandbox, nil)},
		OnRequest: func(q mcp.Request) {
			// Every server-initiated request is audited, answered (roots, when configured)
			// or refused.
			if err := os.MkdirAll(runDir, 0o700); err == nil {
				if err := appendJSONL(filepath.Join(runDir, "mcp_requests.jsonl"), mcpRequestRecord(q)); err != nil {
					e.logf("run %s: %v", rec.ID, err)
				}
			}
			e.logf("run %s: MCP server %s sent %s (answered: %v)", rec.ID, q.Server, q.Method, q.Answered)
		}})
	rec.MCP = exec.mcp.Status
	for _, st := range rec.MCP {
		if st.Granted && st.Error != "" {
			e.logf("run %s: MCP server %s: %s", rec.ID, st.Server, st.Error)
		}
	}
	p := &pipeline.Pipeline{
		Tools: exec.mcp.Tools,
		FS:    fsys,
		Perms: &pipeline.Permissions{User: cfg.Perms, Blueprint: bp.Perms, Yolo: rec.Yolo, Allow: allow, Foreign: bp.Foreign},
		Gate:  gate, Exec: exec, Asker: ask, HTTP: httpc,
		Env:       scrubSecrets(pipeline.ScrubEnv(os.Environ(), cfg.Provider.APIKeyEnv), e.Secrets),
		Protected: state.Paths(),
	}
	r := &run{rec: rec, bp: bp, cfg: cfg, pipe: p, prov: prov, model: model, exec: exec, asker: api}
	if api != nil {
		api.r = r
	}
	p.Decided = func(c *pipeline.Call, res *pipeline.Result) {
		if gev, ok := gateEvent(c); ok {
			r.emit(e, gev)
		}
		r.emit(e, callEvent(c, res))
	}
	return r, nil
}

func (e *Engine) spawn(r *run) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.mu.Lock()
	l := e.entry(r.rec.ID)
	l.cancel, l.done, l.asker = cancel, done, r.asker
	e.mu.Unlock()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer cancel()
		defer pipeline.Close(r.exec)
		defer e.closeEvents(r)
		defer func() {
			e.mu.Lock()
			l.cancel, l.asker = nil, nil
			if l.done == done {
				l.done = nil
			}
			e.tidy(r.rec.ID)
			e.mu.Unlock()
			close(done)
		}()
		e.drive(ctx, r)
	}()
}

// Wait waits for every spawned run to end.
func (e *Engine) Wait() { e.wg.Wait() }

// Stop cancels every active run and waits.
func (e *Engine) Stop() { e.StopWithin(0) }

// StopWithin cancels every active run and waits for them, at most d (0: no bound). Every
// tool call honours its context and has a deadline, so runs end promptly; the bound is
// for whatever does not (a stuck filesystem): the daemon stops anyway, and reports false.
func (e *Engine) StopWithin(d time.Duration) bool {
	e.mu.Lock()
	for _, l := range e.runs {
		if l.cancel != nil {
			l.cancel()
		}
	}
	e.mu.Unlock()
	if d <= 0 {
		e.wg.Wait()
		return true
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		e.logf("stopping: runs still busy after %s; exiting without them", d)
		return false
	}
}

// stageState is stage.json plus the conversation.
type stageState struct {
	rec      *StageRecord
	dir      string
	messages []provider.Message
}

func (e *Engine) drive(ctx context.Context, r *run) {
	rec := r.rec
	fail := func(status Status, msg string, ref *pipeline.Refusal) {
		if err := r.evErr(); err != nil && !strings.Contains(msg, err.Error()) {
			msg += "; " + err.Error()
		}
		rec.Status, rec.Error, rec.Refusal = status, msg, ref
		end := events.Event{Type: events.RunEnd, Status: events.Status(status), Error: msg}
		if ref != nil {
			end.Step = ref.Step
		}
		defer r.emit(e, end)
		if err := e.labelRun(r); err != nil {
			// The record is still written: unlabelled, a run's records read as Private.
			rec.Error = msg + "; " + err.Error()
		}
		if err := e.Store.Save(rec); err != nil {
			// Nowhere left to put it but the daemon's log: say so loudly.
			e.logf("run %s: %s: %s; AND ITS RECORD COULD NOT BE WRITTEN: %v", rec.ID, status, msg, err)
			return
		}
		e.logf("run %s: %s: %s", rec.ID, status, msg)
	}
	if len(rec.Stages) != len(r.bp.Order) {
		fail(StatusFailed, fmt.Sprintf("blueprint %s now has %d stages, the run has %d; cannot resume", r.bp.Name, len(r.bp.Order), len(rec.Stages)), nil)
		return
	}
	var prev json.RawMessage
	for i := range rec.Stages {
		sr := &rec.Stages[i]
		if sr.Status == StatusCompleted {
			prev = sr.Output
			continue
		}
		rec.Stage = i
		st := r.bp.Order[i]
		ss := &stageState{rec: sr, dir: e.Store.StageDir(rec.ID, i)}
		if err := os.MkdirAll(ss.dir, 0o700); err != nil {
			fail(StatusFailed, err.Error(), nil)
			return
		}
		if sr.Status == StatusPending {
			ss.messages = []provider.Message{{Role: "user", Content: r.firstMessage(i, st, prev)}}
		} else if err := readJSON(filepath.Join(ss.dir, "messages.json"), &ss.messages); err != nil {
			fail(StatusFailed, fmt.Sprintf("stage %s: reading its conversation: %v", st.Name, err), nil)
			return
		}
		sr.Status = StatusRunning
		r.emit(e, events.Event{Type: events.StageStart, Stage: st.Name, StageIndex: intp(i), Turn: sr.Turns})
		if err := e.labelRun(r); err != nil {
			fail(StatusFailed, err.Error(), nil)
			return
		}
		if err := e.Store.Save(rec); err != nil {
			fail(StatusFailed, err.Error(), nil)
			return
		}
		status, msg, ref := e.stage(ctx, r, i, st, ss)
		sr.Status = status
		// A stage's record is complete whatever ended it; a write that fails fails the run,
		// and its error (naming the file) is added to whatever ended the stage.
		if err := e.saveStage(r, ss); err != nil {
			if status == StatusFailed {
				msg += "; then " + err.Error()
			} else {
				msg = err.Error()
			}
			status, ref = StatusFailed, nil
			sr.Status = status
		}
		r.emit(e, events.Event{Type: events.StageEnd, Stage: st.Name, StageIndex: intp(i), Status: events.Status(status), Turn: sr.Turns, Error: msg})
		if status != StatusCompleted {
			fail(status, msg, ref)
			return
		}
		prev = sr.Output
	}
	rec.Status = StatusCompleted
	rec.Result = prev
	rec.Stage = len(rec.Stages) - 1
	if err := e.labelRun(r); err != nil {
		fail(StatusFailed, err.Error(), nil)
		return
	}
	if err := writeJSON(filepath.Join(e.Store.RunDir(rec.ID), "result.json"), map[string]any{"id": rec.ID, "agent": rec.Agent, "output": prev}); err != nil {
		rec.Result = nil
		fail(StatusFailed, err.Error(), nil)
		return
	}
	if err := r.evErr(); err != nil {
		rec.Result = nil
		fail(StatusFailed, err.Error(), nil)
		return
	}
	if err := e.Store.Save(rec); err != nil {
		e.logf("run %s: completed, BUT ITS RECORD COULD NOT BE WRITTEN: %v", rec.ID, err)
		r.emit(e, events.Event{Type: events.RunEnd, Status: events.Status(StatusFailed), Error: "completed, but its record could not be written: " + err.Error()})
		return
	}
	r.emit(e, resultOutputEvent(prev))
	r.emit(e, events.Event{Type: events.RunEnd, Status: events.Status(StatusCompleted), Bytes: len(prev)})
	e.logf("run %s: completed", rec.ID)
}

func (r *run) firstMessage(i int, st *blueprint.Stage, prev json.RawMessage) string {
	var b strings.Builder
	b.WriteString(st.Prompt)
	if i == 0 {
		if r.rec.Input != "" {
			b.WriteString("\n\nTask:\n" + r.rec.Input)
		}
		b.WriteString(r.seeds)
	} else if prev != nil {
		b.WriteString("\n\nOutput of the previous stage:\n" + string(prev))
	}
	return b.String()
}

// stage drives one stage: model turn, tool calls, until submit_output, a plain answer, or
// the turn limit.
func (e *Engine) stage(ctx context.Context, r *run, i int, st *blueprint.Stage, ss *stageState) (Status, string, *pipeline.Refusal) {
	pst := pipeline.Stage{Index: i, Name: st.Name, Dir: ss.dir, Tools: st.Tools, Sandbox: mergeSandbox(r.bp.Sandbox, st.Sandbox)}
	// Calls left over from a refused turn run first, under the config in force now. The
	// caller writes stage.json and messages.json when the stage ends, however it ends.
	if pending := ss.rec.Pending; len(pending) > 0 {
		ss.rec.Pending = nil
		if status, msg, ref, done := e.calls(ctx, r, pst, ss, pending); done {
			return status, msg, ref
		}
	}
	for ss.rec.Turns < st.MaxTurns {
		if err := ctx.Err(); err != nil {
			return StatusFailed, "cancelled", nil
		}
		resp, err := r.prov.Complete(ctx, &provider.Request{Model: r.model, System: r.bp.SystemPrompt, Messages: ss.messages,
			Tools: r.pipe.Specs(pst), MaxTokens: r.cfg.Provider.MaxTokens, Stage: st.Name})
		ss.rec.Turns++
		if err != nil {
			return StatusFailed, fmt.Sprintf("stage %s: model: %v", st.Name, err), nil
		}
		r.emit(e, events.Event{Type: events.Turn, Stage: st.Name, StageIndex: intp(i), Turn: ss.rec.Turns, Calls: len(resp.ToolCalls), Bytes: len(resp.Text)})
		resp.ToolCalls = recordableCalls(resp.ToolCalls)
		ss.messages = append(ss.messages, provider.Message{Role: "assistant", Content: resp.Text, ToolCalls: resp.ToolCalls})
		if len(resp.ToolCalls) == 0 {
			ref, err := e.gateAnswer(ctx, r, pst, ss, resp.Text)
			if err != nil {
				return StatusFailed, err.Error(), nil
			}
			if ref != nil {
				ss.messages = append(ss.messages, provider.Message{Role: "user", Content: ref.Msg})
				if err := e.saveStage(r, ss); err != nil {
					return StatusFailed, err.Error(), nil
				}
				continue
			}
			out, _ := json.Marshal(resp.Text)
			ss.rec.Output = out
			return "completed", "", nil
		}
		if status, msg, ref, done := e.calls(ctx, r, pst, ss, resp.ToolCalls); done {
			return status, msg, ref
		}
		if err := e.saveStage(r, ss); err != nil {
			return StatusFailed, err.Error(), nil
		}
	}
	return StatusFailed, fmt.Sprintf("stage %s: no output after %d turns", st.Name, st.MaxTurns), nil
}

// calls runs a turn's tool calls in order. done is set when the stage ends: output
// submitted, or a refusal a grant would lift (the rest wait in Pending for lev resume).
func (e *Engine) calls(ctx context.Context, r *run, pst pipeline.Stage, ss *stageState, calls []provider.ToolCall) (status Status, msg string, ref *pipeline.Refusal, done bool) {
	for k, tc := range calls {
		c, res := r.pipe.Handle(ctx, pst, tc)
		ss.rec.ToolCalls++
		r.emit(e, resultEvent(c, res))
		if err := e.record(r, ss, c, res); err != nil {
			// The call ran but its trail is lost: stop here rather than go on unrecorded.
			return StatusFailed, err.Error(), nil, true
		}
		if err := gateErr(r.pipe.Gate); err != nil {
			return StatusFailed, err.Error(), nil, true
		}
		if err := r.evErr(); err != nil {
			return StatusFailed, err.Error(), nil, true
		}
		if res.Refusal != nil && res.Refusal.Code == workfs.CodeNotGranted {
			ss.rec.Pending = append([]provider.ToolCall(nil), calls[k:]...)
			return StatusRefused, res.Refusal.Msg + " (then: lev resume " + r.rec.ID + ")", res.Refusal, true
		}
		ss.messages = append(ss.messages, provider.Message{Role: "tool", ToolCallID: tc.ID, Name: tc.Name, Content: res.Content, IsError: res.IsError})
		if tc.Name == "submit_output" && res.Output != nil {
			ss.rec.Output = res.Output
			return "completed", "", nil, true
		}
	}
	return "", "", nil, false
}

// mcpRequest is one mcp_requests.jsonl line: a request an MCP server sent to lev.
type mcpRequest struct {
	Time     time.Time       `json:"time"`
	Server   string          `json:"server"`
	Method   string          `json:"method"`
	Params   json.RawMessage `json:"params,omitempty"`
	Decision string          `json:"decision"` // refused | answered
}

func mcpRequestRecord(q mcp.Request) mcpRequest {
	d := "refused"
	if q.Answered {
		d = "answered"
	}
	params := q.Params
	if len(params) > 4096 || !json.Valid(params) {
		params, _ = json.Marshal(string(params[:min(len(params), 4096)]))
	}
	return mcpRequest{Time: time.Now().UTC(), Server: q.Server, Method: q.Method, Params: params, Decision: d}
}

// callRecord is one tool_calls.jsonl line.
type callRecord struct {
	Time             time.Time          `json:"time"`
	ID               string             `json:"id"`
	Tool             string             `json:"tool"`
	Args             json.RawMessage    `json:"args"`
	Permission       string             `json:"permission,omitempty"`
	PermissionSource string             `json:"permission_source,omitempty"`
	Reads            []workfs.Access    `json:"reads,omitempty"`
	Writes           []workfs.Access    `json:"writes,omitempty"`
	Targets          []string           `json:"targets,omitempty"`
	Gate             *pipeline.Decision `json:"gate,omitempty"`
	Refusal          *pipeline.Refusal  `json:"refusal,omitempty"`
	IsError          bool               `json:"is_error,omitempty"`
	Result           string             `json:"result"`
	DurationMS       float64            `json:"duration_ms"`
}

func (e *Engine) record(r *run, ss *stageState, c *pipeline.Call, res *pipeline.Result) error {
	if err := e.labelRun(r); err != nil {
		return err
	}
	out := res.Content
	if len(out) > 4096 {
		out = out[:4096] + "…"
	}
	// The decoded arguments the tool acted on (raw bytes, as a string, only for a call
	// refused before they decoded).
	args := c.ArgsJSON()
	cr := callRecord{Time: time.Now().UTC(), ID: c.ID, Tool: c.Tool, Args: args, Permission: string(c.Permission),
		PermissionSource: c.PermissionSource, Reads: c.Reads, Writes: c.Writes, Targets: c.Targets, Gate: c.Gate,
		Refusal: res.Refusal, IsError: res.IsError, Result: out, DurationMS: float64(res.Duration.Microseconds()) / 1000}
	return appendJSONL(filepath.Join(ss.dir, "tool_calls.jsonl"), cr)
}

// saveStage writes the stage's conversation and stage.json, labelled first.
func (e *Engine) saveStage(r *run, ss *stageState) error {
	if err := e.labelRun(r); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(ss.dir, "messages.json"), ss.messages); err != nil {
		return err
	}
	return writeJSON(filepath.Join(ss.dir, "stage.json"), ss.rec)
}

// recordableCalls makes a model's tool calls storable: arguments that are not JSON (a
// model's malformed output) are kept as a JSON string of the raw text, so messages.json
// and stage.json can still be written and the pipeline refuses the call as bad arguments.
func recordableCalls(calls []provider.ToolCall) []provider.ToolCall {
	for i, tc := range calls {
		if !json.Valid(tc.Args) {
			calls[i].Args, _ = json.Marshal(string(tc.Args))
		}
	}
	return calls
}

// gateErr is a gate's failure to write its own record (taint_state.json): the run's taint
// would be lost on resume, so the run stops.
func gateErr(g pipeline.Gate) error {
	if e, ok := g.(interface{ Err() error }); ok {
		return e.Err()
	}
	return nil
}

// mergeSandbox lays a stage's [sandbox] keys over the agent's (sandbox.Overlay).
func mergeSandbox(agent, stage *sandbox.Config) *sandbox.Config {
	if agent == nil && stage == nil {
		return nil
	}
	var a, st sandbox.Config
	if agent != nil {
		a = *agent
	}
	if stage != nil {
		st = *stage
	}
	m := sandbox.Overlay(a, st)
	return &m
}

// LabelStore is the engine's taint label store: Labels, or taint-labels.json beside the
// runs directory (in lev's state, where no tool writes).
func (e *Engine) LabelStore() *labels.Store {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.Labels == nil {
		e.Labels = &labels.Store{Path: filepath.Join(filepath.Dir(e.Store.Dir), "taint-labels.json"),
			Runs: e.Store.Dir, State: []string{levconfig.Home(), filepath.Dir(e.Store.Dir)}}
	}
	return e.Labels
}

// labelRun raises the run's stored label to the highest its context ever had, before a
// record holding that context is written: a later run that reads the record (through a
// grant of the runs directory, or a lev home inside its workdir) takes this label. A gate
// that cannot say (none registered) leaves the run Private.
func (e *Engine) labelRun(r *run) error {
	l := taint.Private
	if h, ok := r.pipe.Gate.(interface{ HighWater() taint.Level }); ok {
		l = h.HighWater()
	}
	return e.LabelStore().RaiseRun(r.rec.ID, l)
}

// labelSeeds gives the first message the stored labels of the files its seeds read: a
// seed must not launder a file a tainted run wrote. A script seed's output is labelled
// like shell output, by what the workdir holds.
func (e *Engine) labelSeeds(r *run) {
	g, ok := r.pipe.Gate.(interface {
		AddInput(stage int, l taint.Level, origin string)
	})
	if !ok {
		return
	}
	ls := e.LabelStore()
	for _, s := range r.rec.Seeds {
		var l taint.Level
		var err error
		if s.Kind == "script" {
			l, err = ls.Tree(r.pipe.FS.Workdir, true)
		} else {
			l, err = ls.File(s.Real)
		}
		if err != nil {
			e.logf("run %s: seed %s: %v (read as private)", r.rec.ID, s.Path, err)
		}
		if l > taint.Internal {
			g.AddInput(0, l, "seed "+s.Path)
		}
	}
}

// startEvents opens the run's events log for this leg and writes its run_start.
func (e *Engine) startEvents(r *run, how string) error {
	if err := e.openEvents(r); err != nil {
		return fmt.Errorf("run %s: %w", r.rec.ID, err)
	}
	r.emit(e, events.Event{Type: events.RunStart, Agent: r.rec.Agent, Status: events.Status(StatusRunning), Message: how + " in " + r.rec.Workdir})
	if err := r.evErr(); err != nil {
		e.closeEvents(r)
		return fmt.Errorf("run %s: %w", r.rec.ID, err)
	}
	r.rec.FirstEvent = r.ev.Last()
	return nil
}
