package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/taint/labels"
	"github.com/lever-jail/lever/internal/lev/toolnames"
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
	// unsaved is, per run, the end its goroutine could not write to run.json (a full
	// disk): what Load reports for it instead of the "running" left on disk. Under mu.
	unsaved map[string]*Record
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
	// conv is the running stage's conversation, for the context tools.
	conv *convo
	// ev is this leg's events log (events.jsonl); nil until the run exists.
	ev       *events.Log
	evWarned bool
	// searchUsage is what web_search's own model calls used, added by the tool (which may
	// run past its deadline in its own goroutine) and moved into rec.Usage by the drive
	// loop, the record's one writer.
	searchMu    sync.Mutex
	searchUsage provider.Usage
}

// addUsage counts one model call's tokens in the run's record (drive loop only), with
// whatever web_search's calls used since the last time.
func (r *run) addUsage(u provider.Usage) {
	r.searchMu.Lock()
	u.Add(r.searchUsage)
	r.searchUsage = provider.Usage{}
	r.searchMu.Unlock()
	if u == (provider.Usage{}) {
		return
	}
	if r.rec.Usage == nil {
		r.rec.Usage = &provider.Usage{}
	}
	r.rec.Usage.Add(u)
}

// search is the run's web_search: its provider's, with its model, when the provider
// can search (pipeline.Pipeline.Search).
func (r *run) searchFunc() pipeline.SearchFunc {
	s, ok := r.prov.(provider.Searcher)
	if !ok {
		return nil
	}
	return func(ctx context.Context, q string) (*provider.SearchResult, error) {
		res, err := s.Search(ctx, &provider.SearchRequest{Model: r.model, Query: q})
		if res != nil {
			r.searchMu.Lock()
			r.searchUsage.Add(res.Usage)
			r.searchMu.Unlock()
		}
		return res, err
	}
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
	// Claimed before run.json first says "running", so that Load never takes a run
	// between that save and its goroutine's start for one nobody drives.
	e.mu.Lock()
	e.entry(rec.ID).cancel = func() {}
	e.mu.Unlock()
	unclaim := func() {
		e.mu.Lock()
		e.release(rec.ID)
		e.mu.Unlock()
	}
	if err := e.Store.Save(rec); err != nil {
		pipeline.Close(r.exec)
		unclaim()
		return nil, fmt.Errorf("recording run: %w", err)
	}
	if err := e.startEvents(r, "spawned"); err != nil {
		pipeline.Close(r.exec)
		rec.Status, rec.Error = StatusFailed, err.Error()
		e.saveEnd(rec)
		unclaim()
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
	if rec.Parent != "" {
		// Its permissions were its parent's, narrowed at the parent's call; resumed on its
		// own it would take the config in force now instead.
		return nil, fmt.Errorf("run %s is a sub-agent of run %s: it is not resumed on its own (lev resume %s runs its spawn_agent call again)", id, rec.Parent, rec.Parent)
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
			e.saveEnd(rec)
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
