package runner

// Preparing a run for a leg: the blueprint and config it was admitted under, its
// pipeline, executor, taint gate and MCP tools, so drive only has to run stages.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/mcp"
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/sandbox"
)

// prepare loads the blueprint (a resumed run's from the snapshot in its record) and
// config and builds the pipeline: everything that can fail before the run starts.
func (e *Engine) prepare(rec *Record, resume bool) (*run, error) {
	return e.prepareWith(rec, resume, prepOpts{})
}

// prepOpts are what a sub-agent's preparation takes from its parent instead of from the
// engine (subagent.go).
type prepOpts struct {
	// cfg is the parent's config: a reload since the parent started cannot widen its child.
	cfg *levconfig.Config
	// narrow turns the parent's blueprint into the child's, before anything is built.
	narrow func(*blueprint.Blueprint) (*blueprint.Blueprint, error)
	// asker is the parent's: the child's prompts go to whoever answers the parent's.
	asker pipeline.Asker
}

func (e *Engine) prepareWith(rec *Record, resume bool, o prepOpts) (*run, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	cfg := e.Config()
	if o.cfg != nil {
		cfg = o.cfg
	}
	if resume && rec.Admission == nil {
		return nil, fmt.Errorf("run %s has no blueprint snapshot (recorded by an older lev): it cannot be resumed from what it was admitted under; start a new run", rec.ID)
	}
	bp, file, err := e.loadBlueprint(rec)
	if err != nil {
		return nil, err
	}
	if o.narrow != nil {
		if bp, err = o.narrow(bp); err != nil {
			return nil, err
		}
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
	if o.asker != nil {
		ask = o.asker
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
		OnRequest: func(q mcp.Request) error {
			// Every server-initiated request is audited before it is answered (roots, when
			// configured) or refused. One that cannot be written fails closed, as the
			// taint gate's audit does: the error refuses the request and drops the
			// server's session (every later call to it fails saying why), so no server
			// goes on talking to the run past a request its record does not show.
			if err := recordMCPRequest(runDir, q); err != nil {
				e.logf("run %s: MCP server %s sent %s, which could not be recorded: refused, and the server dropped: %v", rec.ID, q.Server, q.Method, err)
				return err
			}
			e.logf("run %s: MCP server %s sent %s (answered: %v)", rec.ID, q.Server, q.Method, q.Answered)
			return nil
		},
		// A server over mcp's limits on what it sends unasked (or with a request that could
		// not be recorded) is dropped: the log says why once, and every later call to it
		// fails with the same words in the run's record.
		OnDrop: func(err error) { e.logf("run %s: %v", rec.ID, err) }})
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
		RunDir:    runDir,
	}
	r := &run{rec: rec, bp: bp, cfg: cfg, pipe: p, prov: prov, model: model, exec: exec, asker: api, conv: newConvo(gate)}
	p.Context = r.conv
	p.Search = r.searchFunc()
	if api != nil {
		api.r = r
	}
	p.RunID = rec.ID
	// ask_operator goes to whoever answers this run's prompts (a sub-agent's: its
	// parent's); with nobody there it has no operator and says so.
	if op, ok := ask.(pipeline.Operator); ok {
		p.Operator = op
	}
	p.SubAgents = &subAgents{e: e, parent: r}
	p.Decided = func(c *pipeline.Call, res *pipeline.Result) {
		if gev, ok := gateEvent(c); ok {
			r.emit(e, gev)
		}
		r.emit(e, callEvent(c, res))
	}
	return r, nil
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
