package taintgate

import (
	"context"
	"fmt"

	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/taint/labels"
	"github.com/lever-jail/lever/internal/lev/toolcat"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// mcpResultLabel is the label the user gave an MCP server's results (result_label), if
// higher than what the runtime would give them.
func (g *Gate) mcpResultLabel(tool string) taint.Level {
	srv, _, ok := toolnames.SplitMCP(tool)
	if !ok || g.cfg() == nil {
		return taint.Public
	}
	if s := g.cfg().MCP.Servers[srv]; s != nil && s.ResultLabel == "private" {
		return taint.Private
	}
	return taint.Public
}

// Observe labels a finished call's result as it enters the conversation.
func (g *Gate) Observe(_ context.Context, c *pipeline.Call, r *pipeline.Result) {
	if r == nil || (r.Refusal != nil && r.Refusal.Step != pipeline.StepFence) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.enter(c.Stage.Index)
	// A refusal or error names paths and what they resolve to (a symlink's target is data
	// a run wrote): it reads at least at the label of the workdir's names.
	named := taint.Public
	if r.Refusal != nil || (r.IsError && !sandboxed(c.Tool)) {
		named = g.namesLevel()
	}
	if r.Refusal != nil {
		l := taint.Max(named, taint.ResultLevel(c.Tool, taint.ResultInfo{ThroughGrant: c.Private(), AgentHasGrant: g.hasGrant}))
		g.byCall[c.ID] = g.add(region(c.Stage.Index), l, c.Tool+" "+c.ID+" (refused)")
		g.save()
		return
	}
	if !r.IsError {
		g.labelWrites(c)
	}
	switch {
	case c.Tool == "todo_write" && !r.IsError:
		// Replaced: what the list held before is gone, what it holds now came from the
		// context as it is.
		g.todo = g.ctx.Level()
	case c.Tool == "todo_write":
		g.todo = taint.Max(g.todo, g.ctx.Level())
	}
	l := taint.ResultLevel(c.Tool, taint.ResultInfo{ThroughGrant: c.Private(), AgentHasGrant: g.hasGrant})
	if c.Tool == "todo_read" || c.Tool == "todo_write" {
		// Both results show the list (todo_write echoes what it saved).
		l = taint.Max(l, g.todo)
	}
	l = taint.Max(l, g.storedLevel(c))
	l = taint.Max(l, g.mcpResultLabel(c.Tool))
	l = taint.Max(l, named)
	if r.Label != "" {
		// The runtime's own label for the result (a sub-agent's: the child run's). One
		// that does not parse reads as Private: fail closed.
		rl, err := taint.ParseLevel(r.Label)
		if err != nil {
			rl = taint.Private
		}
		l = taint.Max(l, rl)
	}
	g.byCall[c.ID] = g.add(region(c.Stage.Index), l, c.Tool+" "+c.ID)
	g.markChanged(c)
	g.save()
}

// writesAnywhere: the tool runs a process that can create, copy, rename and link files
// anywhere in the workdir, out of sight of the file tools (shell, and what seesWorkdir
// names).
func (g *Gate) writesAnywhere(tool string) bool { return sandboxed(tool) || g.seesWorkdir(tool) }

// noteStart snapshots the workdir before a call that writes anywhere runs, when what
// the call could read is above Internal (else nothing it writes needs a label).
func (g *Gate) noteStart(c *pipeline.Call) {
	if g.env.Labels == nil || g.env.Workdir == "" || !g.writesAnywhere(c.Tool) {
		return
	}
	g.mu.Lock()
	l := taint.Max(g.ctx.Level(), taint.ResultLevel(c.Tool, taint.ResultInfo{ThroughGrant: c.Private(), AgentHasGrant: g.hasGrant}))
	l = taint.Max(l, g.mcpResultLabel(c.Tool))
	g.mu.Unlock()
	if l <= taint.Internal {
		tl, err := g.env.Labels.Tree(g.env.Workdir, true)
		if err != nil {
			tl = taint.Private
		}
		l = taint.Max(l, tl)
	}
	if l <= taint.Internal {
		return
	}
	snap := g.env.Labels.Snapshot(g.env.Workdir)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.began == nil {
		g.began = map[string]*labels.Snapshot{}
	}
	g.began[c.ID] = snap
}

// markChanged labels what a finished shell command (or stdio MCP call) changed in the
// workdir with the context's level now: it includes what the command could read (its
// output's label is the workdir's) and what the context held when it ran. A copy made by
// `cp`, a file a script derived from a labelled one, a rename: all keep the label. Called
// with g.mu held.
func (g *Gate) markChanged(c *pipeline.Call) {
	snap, ok := g.began[c.ID]
	if !ok {
		return
	}
	delete(g.began, c.ID)
	if _, err := g.env.Labels.MarkChanged(snap, g.ctx.Level()); err != nil {
		// The run stops: what the command wrote would otherwise read unlabelled.
		if g.err == nil {
			g.err = fmt.Errorf("labelling what %s %s changed in the workdir: %w", c.Tool, c.ID, err)
		}
	}
}

// labelWrites records the label of the files a successful write_file or edit_file wrote:
// the context's level (the content came from it); edit_file keeps the file's older label
// too, since the rest of the file is still there. Called with g.mu held.
func (g *Gate) labelWrites(c *pipeline.Call) {
	if g.env.Labels == nil {
		return
	}
	for _, w := range c.Writes {
		if err := g.env.Labels.AfterWrite(w.Real, g.ctx.Level(), c.Tool == "write_file"); err != nil {
			// The stamp taken before the write still labels the path; only the inode
			// (which follows a later rename) is missing.
			g.logf("run %s: %v", g.env.RunID, err)
		}
	}
}

// namesLevel is the label of the names under the workdir (list_dir's), what an error or
// refusal naming paths there may carry. Called with g.mu held.
func (g *Gate) namesLevel() taint.Level {
	if g.env.Labels == nil || g.env.Workdir == "" {
		return taint.Public
	}
	l, err := g.env.Labels.Tree(g.env.Workdir, false)
	if err != nil {
		g.logf("run %s: %v (read as private)", g.env.RunID, err)
	}
	return l
}

// storedLevel is the label lev stored for what the call read: a labelled file, a run
// record, lev's state. list_dir yields names, so it takes the labels under the directory;
// shell, and any tool lev did not build in that runs where it can open the workdir's
// files (a stdio MCP server), can read the whole workdir. Called with g.mu held.
func (g *Gate) storedLevel(c *pipeline.Call) taint.Level {
	ls := g.env.Labels
	if ls == nil {
		return taint.Public
	}
	l := taint.Public
	raise := func(x taint.Level, err error) {
		if err != nil {
			g.logf("run %s: %v (read as private)", g.env.RunID, err)
		}
		l = taint.Max(l, x)
	}
	switch {
	case sandboxed(c.Tool) || g.seesWorkdir(c.Tool):
		raise(ls.Tree(g.env.Workdir, true))
	case c.Tool == "list_dir" || c.Tool == "glob":
		for _, a := range c.Reads {
			raise(ls.Tree(a.Real, false))
		}
	case c.Tool == "grep":
		// grep reads every file under its root (the walk's own reads are not in c.Reads):
		// the highest label stored under it.
		for _, a := range c.Reads {
			raise(ls.Tree(a.Real, true))
		}
	default:
		for _, a := range c.Reads {
			raise(ls.File(a.Real))
		}
	}
	return l
}

// sandboxed: a built-in that runs a process in the run's sandbox (the shell, by its
// catalogue row), which sees and may change every file of the workdir.
func sandboxed(tool string) bool {
	row, ok := toolcat.Lookup(tool)
	return ok && row.Sandbox
}

// seesWorkdir reports whether a tool lev did not build in may return any file of the
// workdir. A stdio MCP server does: lev starts it in the run's sandbox exactly as it runs
// a shell command (on the host or in a namespace it sees the host's files, in a container
// the workdir's mount), and its arguments are not fenced (lev cannot tell which one names
// a path), so its result is labelled like shell output. A server config.toml reaches by
// url is remote: lev does not start it and it has no way into the workdir's files (what
// it serves is its own; lev hands it only the arguments, which the gate checks as they
// leave), unless the user gave it the workdir as its root (roots = true), which only a
// server that can open the workdir has a use for. Anything else not built in (a server
// the config no longer names) fails closed: it counts as seeing the workdir.
func (g *Gate) seesWorkdir(tool string) bool {
	if toolcat.Known(tool) {
		return false
	}
	if srv, _, ok := toolnames.SplitMCP(tool); ok && g.cfg() != nil {
		if s := g.cfg().MCP.Servers[srv]; s != nil && !s.Stdio() && !s.Roots {
			return false
		}
	}
	return true
}
