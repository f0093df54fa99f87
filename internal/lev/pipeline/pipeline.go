// Package pipeline is the one path every tool call takes, in one order:
//
//  1. offer:      the tool is offered in this stage, and its arguments decode, once and
//     strictly, into the tool's own argument type (Call.Args); every later step, the
//     record and any person asked read that one value, never the raw JSON again
//  2. permission: allow / ask / deny from config.toml, tightened by the blueprint; deny is
//     final; --yolo and --allow turn ask into allow; with nobody to ask, ask is a refusal
//  3. fence:      every file tool is confined to the workdir; reads (never writes) may leave
//     it only through a declared and granted [read_paths] entry, on the real path
//  4. gate:       the taint gate (a Gate, required: a pipeline without one refuses every call)
//  5. execute:    the tool runs under its deadline; shell goes through the Executor
//     (required: without one, shell fails)
//  6. observe:    the gate sees the result (so taint can label what was read)
//
// A refusal at any step stops the call there and says which step refused it and why.
//
// It owns that order and the built-in tools. It must not be bypassed: nothing else in lev
// calls a tool, and no step may be skipped or reordered for any tool, built-in or MCP.
package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/toolcat"
	"github.com/lever-jail/lever/internal/lev/toolnames"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// Steps, as recorded in a refusal.
const (
	StepOffer      = "offer"
	StepPermission = "permission"
	StepFence      = "fence"
	StepGate       = "gate"
	StepExecute    = "execute"
)

// Stage is what the pipeline knows about the running stage.
type Stage struct {
	Index   int // 0-based
	Name    string
	Dir     string // runs/<id>/stages/<n>/: the gate's taint_audit.json goes here
	Tools   []string
	Sandbox *sandbox.Config // the stage's [sandbox] over the agent's, nil when neither is set
}

// Offers reports whether tool is offered in the stage: listed by name, or an MCP tool
// whose server's mcp__SERVER__* the stage lists.
func (s Stage) Offers(tool string) bool {
	wild := ""
	if srv, _, ok := toolnames.SplitMCP(tool); ok {
		wild = toolnames.MCPPrefix + srv + "__*"
	}
	for _, t := range s.Tools {
		if t == tool || (wild != "" && t == wild) {
			return true
		}
	}
	return false
}

// Call is one tool call as it moves through the steps; each step fills in its part.
type Call struct {
	ID   string
	Tool string
	// Raw is the arguments as the model sent them. Only the offer step reads it: it
	// decodes Raw once, strictly, into Args.
	Raw   json.RawMessage
	Args  Args // the decoded arguments (offer); nil when refused before they decoded
	Stage Stage

	Spec             *Tool
	Permission       blueprint.Permission // the effective permission (permission)
	PermissionSource string               // what set it, and any flag that lifted ask
	Reads            []workfs.Access      // resolved reads (fence)
	Writes           []workfs.Access      // resolved writes (fence)
	Targets          []string             // network targets: URLs (offer)
	Gate             *Decision            // the gate's decision (gate)
}

// ArgsJSON is the decoded arguments re-encoded: exactly what the tool acts on, for the
// run record and for a person asked to approve the call. A call refused before its
// arguments decoded carries its raw bytes as a JSON string, so they are never taken for
// arguments that ran.
func (c *Call) ArgsJSON() json.RawMessage {
	if c.Args != nil {
		if b, err := json.Marshal(c.Args); err == nil {
			return b
		}
	}
	b, _ := json.Marshal(string(c.Raw))
	return b
}

// PolicyArgs is the view of the decoded arguments the taint policy matches (the map
// taint.Target reads, the same shape `lev policy test` builds from its command line).
// It is derived from Args, never from Raw.
func (c *Call) PolicyArgs() map[string]any {
	m := map[string]any{}
	if c.Args == nil {
		return m
	}
	if o, ok := c.Args.(ObjectArgs); ok {
		return o
	}
	b, err := json.Marshal(c.Args)
	if err == nil {
		_ = json.Unmarshal(b, &m)
	}
	return m
}

// Private reports whether the call reads through a granted read path (outside the
// workdir): such content is Private for taint tracking.
func (c *Call) Private() bool {
	for _, a := range c.Reads {
		if a.Outside {
			return true
		}
	}
	return false
}

// Result is what the model gets back, plus the record.
type Result struct {
	Content  string          `json:"content"`
	IsError  bool            `json:"is_error,omitempty"`
	Output   json.RawMessage `json:"output,omitempty"` // submit_output's payload
	Refusal  *Refusal        `json:"refusal,omitempty"`
	Duration time.Duration   `json:"duration_ns"`
	// Label is the runtime's own label for this result when the tool knows better than
	// its name does (spawn_agent: the child run's label). The gate takes the higher of it
	// and the tool's usual label. Only runtime code sets it, never model output.
	Label string `json:"label,omitempty"`
}

// Refusal records which step refused a call and why.
type Refusal struct {
	Step string `json:"step"`
	Code string `json:"code,omitempty"`
	Msg  string `json:"message"`
}

func (r *Refusal) Error() string { return r.Msg }

func refused(step, code, msg string) *Result {
	return &Result{Content: msg, IsError: true, Refusal: &Refusal{Step: step, Code: code, Msg: msg}}
}

// Decision is a gate's answer.
type Decision struct {
	Allow  bool   `json:"allow"`
	Reason string `json:"reason,omitempty"`
	Source string `json:"source,omitempty"` // e.g. "AutoBlock", "YoloAutoApprove", "no-gate"
	// Taint and Clearance are the labels that drove a taint-gate decision: the context's
	// label when the call was made and the tool's clearance ("" when the gate compared
	// none, e.g. a tool it does not treat as outbound).
	Taint     string `json:"taint,omitempty"`
	Clearance string `json:"clearance,omitempty"`
}

// Gate is the taint gate hook (step 4). Check runs after the fence and before execution;
// Observe runs after execution, also for failed calls.
type Gate interface {
	Check(ctx context.Context, c *Call) (Decision, error)
	Observe(ctx context.Context, c *Call, r *Result)
}

// Question is put to a person when a permission (or a gate) says ask.
type Question struct {
	Tool   string
	Args   json.RawMessage
	Reason string
}

// Asker answers questions; nil means nobody is there (a headless run).
type Asker interface {
	Ask(ctx context.Context, q Question) (bool, error)
}

// Pipeline runs tool calls for one run.
type Pipeline struct {
	FS    *workfs.FS
	Perms *Permissions
	Gate  Gate
	Exec  Executor
	Asker Asker
	HTTP  *http.Client
	// Search runs web_search's searches (nil: the provider has none, and web_search says
	// it is not available).
	Search SearchFunc
	// Env is the environment tools' child processes get.
	Env []string
	// Protected are paths (each a subtree) the file tools never write, even inside the
	// workdir: lev's own home, config.toml and policy file. A workdir that holds lev's
	// home (a jail's tree, say) must not let the agent rewrite its own permissions, grants,
	// taint policy or run records with write_file.
	Protected []string
	// Tools are the run's tools that are not built in (its MCP servers' tools), by their
	// mcp__SERVER__TOOL names; they pass every step like a built-in.
	Tools map[string]*Tool
	// RunDir is runs/<id>/: the todo tools keep the run's list there.
	RunDir string
	// Context is the running stage's conversation, for the context tools (the runner's);
	// nil: they fail.
	Context Conversation
	// Decided, when set, sees each call once steps 1 to 4 have decided on it and before it
	// runs (res is the refusal, nil when it will run): the run's live events say what is
	// about to happen while it happens, not after.
	Decided func(c *Call, res *Result)
	// RunID names the run, for what a tool records about itself (install_tool's stamp).
	RunID string
	// Operator answers ask_operator (nil: nobody is there to; the call says so).
	Operator Operator
	// SubAgents runs spawn_agent's child runs (nil: spawn_agent fails).
	SubAgents SubAgents
}

// Prepare runs steps 1 to 4. A non-nil Result is a refusal (or a bad request) to hand
// back to the model as it is.
func (p *Pipeline) Prepare(ctx context.Context, st Stage, tc provider.ToolCall) (*Call, *Result) {
	c := &Call{ID: tc.ID, Tool: tc.Name, Raw: tc.Args, Stage: st}
	// 1. offer
	spec := p.Lookup(tc.Name)
	if spec == nil || !st.Offers(tc.Name) {
		return c, refused(StepOffer, "not-offered", fmt.Sprintf("%s: refused: tool %q is not offered in stage %q", tc.Name, tc.Name, st.Name))
	}
	c.Spec = spec
	parsed, err := spec.parse(tc.Args)
	if err != nil {
		return c, refused(StepOffer, "bad-arguments", fmt.Sprintf("%s: bad arguments: %v", tc.Name, err))
	}
	c.Args = parsed
	if t, ok := parsed.(interface{ targets() []string }); ok {
		c.Targets = t.targets()
	}
	// 2. permission
	c.Permission, c.PermissionSource = p.Perms.For(tc.Name)
	switch c.Permission {
	case blueprint.Deny:
		return c, refused(StepPermission, "denied", fmt.Sprintf("%s: refused: [tool_permissions] %s = \"deny\" (%s); no flag lifts a deny", tc.Name, tc.Name, c.PermissionSource))
	case blueprint.Ask:
		if p.Asker == nil {
			return c, refused(StepPermission, "ask-headless", fmt.Sprintf("%s: refused: permission is \"ask\" (%s) and nobody is there to answer; allow it with --allow %s or --yolo, or set [tool_permissions] %s = \"allow\" in config.toml", tc.Name, c.PermissionSource, tc.Name, tc.Name))
		}
		ok, err := p.Asker.Ask(ctx, Question{Tool: tc.Name, Args: c.ArgsJSON(), Reason: "permission is ask"})
		if err != nil || !ok {
			return c, refused(StepPermission, "ask-declined", fmt.Sprintf("%s: refused: permission is \"ask\" and the answer was no", tc.Name))
		}
		c.PermissionSource += ", approved when asked"
	}
	// 3. fence
	if fp, ok := parsed.(interface {
		paths() (reads, writes []string)
	}); ok {
		reads, writes := fp.paths()
		for _, r := range reads {
			a, err := p.files().ResolveRead(tc.Name, r)
			var nr *workfs.Refusal
			if spec.fence == toolcat.Workdir && errors.As(err, &nr) && nr.Code == workfs.CodeNotGranted {
				// No grant would let this tool out: not the refusal that stops the run to
				// wait for one (and a lev resume).
				return c, refused(StepFence, workfs.CodeOutside, fmt.Sprintf("%s: refused: %s is outside the workdir; %s searches only the workdir, whatever [read_paths] grants", tc.Name, r, tc.Name))
			}
			if err != nil {
				return c, fenceRefusal(err)
			}
			if a.Outside && spec.fence == toolcat.Workdir {
				return c, refused(StepFence, workfs.CodeOutside, fmt.Sprintf("%s: refused: %s resolves to %s, outside the workdir; %s searches only the workdir, whatever [read_paths] grants (read a granted path with read_file, read_files or list_dir)", tc.Name, r, a.Real, tc.Name))
			}
			c.Reads = append(c.Reads, a)
		}
		for _, w := range writes {
			a, err := p.files().ResolveWrite(tc.Name, w)
			if err != nil {
				return c, fenceRefusal(err)
			}
			if prot := p.protects(a.Real); prot != "" {
				return c, refused(StepFence, "write-protected", fmt.Sprintf("%s: refused: %s is lev's own state (%s); the file tools never write it", tc.Name, w, prot))
			}
			if res := p.toolsDirRefusal(tc.Name, a); res != nil {
				return c, res
			}
			c.Writes = append(c.Writes, a)
		}
	}
	// 4. gate
	if p.Gate == nil {
		// Fail closed: a pipeline built without its gate runs nothing.
		return c, refused(StepGate, "no-gate", fmt.Sprintf("%s: refused: this lev has no taint gate wired; no call runs without one", tc.Name))
	}
	d, err := p.Gate.Check(ctx, c)
	if err != nil {
		d = Decision{Allow: false, Reason: err.Error(), Source: "GateError"}
	}
	c.Gate = &d
	if !d.Allow {
		return c, refused(StepGate, d.Source, fmt.Sprintf("%s: blocked by the taint gate: %s", tc.Name, d.Reason))
	}
	return c, nil
}

// Lookup returns the tool named name: a built-in, else one of the run's own (Tools).
func (p *Pipeline) Lookup(name string) *Tool {
	if t := Lookup(name); t != nil {
		return t
	}
	return p.Tools[name]
}

// Specs are the offers for the model in a stage: its built-ins in the order listed, then
// the run's MCP tools it offers (by name or mcp__SERVER__*), sorted.
func (p *Pipeline) Specs(st Stage) []provider.ToolSpec {
	out := Specs(st.Tools)
	var extra []string
	for name := range p.Tools {
		if st.Offers(name) {
			extra = append(extra, name)
		}
	}
	sort.Strings(extra)
	for _, n := range extra {
		t := p.Tools[n]
		out = append(out, provider.ToolSpec{Name: t.Name, Description: t.Description, Schema: t.Schema})
	}
	return out
}

// files is the filesystem the file tools act through: p.FS, also refusing the Protected
// paths that p.FS.Protect does not already cover, so every descriptor check (workfs) knows
// them as the fence step's path check does.
func (p *Pipeline) files() *workfs.FS {
	var extra []string
	for _, prot := range p.Protected {
		if prot == "" {
			continue
		}
		if r, err := filepath.EvalSymlinks(prot); err == nil {
			prot = r
		}
		if p.FS.Protect != nil {
			if _, ok := p.FS.Protect.Covers(prot); ok {
				continue
			}
		}
		extra = append(extra, prot)
	}
	if len(extra) == 0 {
		return p.FS
	}
	f := *p.FS
	f.Protect = workfs.Union(p.FS.Protect, workfs.Paths(extra))
	return &f
}

// protects returns the protected path that real (a resolved real path) falls under.
func (p *Pipeline) protects(real string) string {
	for _, prot := range p.Protected {
		if prot == "" {
			continue
		}
		if r, err := filepath.EvalSymlinks(prot); err == nil {
			prot = r
		}
		if fspath.Within(prot, real) {
			return prot
		}
	}
	return ""
}

func fenceRefusal(err error) *Result {
	var r *workfs.Refusal
	if errors.As(err, &r) {
		return refused(StepFence, r.Code, r.Msg)
	}
	// Not a refusal (a missing file, say): an ordinary tool error.
	return &Result{Content: err.Error(), IsError: true}
}

// Handle runs a call through every step.
func (p *Pipeline) Handle(ctx context.Context, st Stage, tc provider.ToolCall) (*Call, *Result) {
	start := time.Now()
	c, res := p.Prepare(ctx, st, tc)
	if res != nil {
		capCall(tc.Name, res) // before the live event shows the refusal, too
	}
	if p.Decided != nil {
		p.Decided(c, res)
	}
	if res == nil {
		res = p.executeWithDeadline(ctx, c)
		if p.Gate != nil {
			p.Gate.Observe(ctx, c, res)
		}
	} else if p.Gate != nil && (res.Refusal == nil || res.Refusal.Step == StepGate || res.Refusal.Step == StepFence) {
		// A fence's answer enters the conversation too, and can name what the workdir
		// holds (a symlink's target in "resolves to", a file's name): the gate labels it.
		p.Gate.Observe(ctx, c, res)
	}
	capCall(tc.Name, res)
	res.Duration = time.Since(start)
	return c, res
}

// executeWithDeadline runs the tool under its per-call deadline. A tool that does not
// come back by then (a filesystem that blocks, a server that trickles) is abandoned: the
// run gets an error result and goes on, and a daemon asked to stop is never held by it.
func (p *Pipeline) executeWithDeadline(ctx context.Context, c *Call) *Result {
	d := c.Spec.Deadline(c.Args)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	done := make(chan *Result, 1)
	go func() { done <- p.execute(ctx, c) }()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		return &Result{Content: fmt.Sprintf("%s: no result within %s (the call's deadline, or the run was stopped); abandoned", c.Tool, d), IsError: true}
	}
}

func (p *Pipeline) execute(ctx context.Context, c *Call) *Result {
	res, err := c.Spec.run(ctx, p, c)
	if err != nil {
		var r *workfs.Refusal
		if errors.As(err, &r) {
			if r.Code == workfs.CodeWriteCap {
				// Not the fence: the write was in bounds, its size was not.
				return refused(StepExecute, r.Code, r.Msg)
			}
			// The descriptor re-check caught a path that changed after the fence step.
			return refused(StepFence, r.Code, r.Msg)
		}
		return &Result{Content: err.Error(), IsError: true}
	}
	return res
}

// scrubEnv returns a copy of env without the variables named in drop (exact names, as
// the child process would look them up); env itself is left as it was.
func scrubEnv(env []string, drop ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, d := range drop {
			if k == d {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// ScrubEnv is the environment for tool processes: os.Environ minus lev's token and the
// provider key variable.
func ScrubEnv(env []string, keyEnv string) []string {
	drop := []string{"LEV_TOKEN"}
	if keyEnv != "" {
		drop = append(drop, keyEnv)
	}
	return scrubEnv(env, drop...)
}
