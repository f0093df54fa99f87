package taint

import "sort"

// Class is how the gate treats a tool.
type Class struct {
	// Outbound tools can carry bytes off the machine and are gated.
	Outbound bool
	// Clearance is the highest label an outbound tool may carry without a policy decision.
	Clearance Level
	// Known is false for a tool with no classification of its own (an MCP or script tool):
	// it is then treated as outbound with the lowest clearance, i.e. it fails closed.
	Known bool
}

// DefaultClearance is the clearance of the built-in outbound tools: the project the user
// pointed the agent at (Internal) may flow out, data read through a grant (Private) may not
// without a policy decision.
const DefaultClearance = Internal

// builtin is the classification table of lev's built-in tools. Every built-in carries its
// own entry; only the tools that can send bytes off the machine are outbound.
var builtin = map[string]Class{
	// Outbound: the network tools, the shell (it can reach anything the sandbox lets it),
	// and submit_output, because the final result is handed to whoever reads
	// GET /api/agents/{id}/result.
	"shell":         {Outbound: true, Clearance: DefaultClearance, Known: true},
	"web_search":    {Outbound: true, Clearance: DefaultClearance, Known: true},
	"web_fetch":     {Outbound: true, Clearance: DefaultClearance, Known: true},
	"http_get":      {Outbound: true, Clearance: DefaultClearance, Known: true},
	"http_post":     {Outbound: true, Clearance: DefaultClearance, Known: true},
	"submit_output": {Outbound: true, Clearance: DefaultClearance, Known: true},

	// File tools: confined to the workdir (and read paths) by the pipeline, never gated.
	"read_file":  {Known: true},
	"read_files": {Known: true},
	"list_dir":   {Known: true},
	"write_file": {Known: true},
	"edit_file":  {Known: true},
	// Search tools: reads confined to the workdir.
	"glob": {Known: true},
	"grep": {Known: true},
	// Context tools: the run's own conversation. Dropping an entry evicts its label.
	"context_list": {Known: true},
	"context_drop": {Known: true},
	// Todo tools: the run's own list, labelled like a file the run wrote (taintgate).
	"todo_read":  {Known: true},
	"todo_write": {Known: true},
	// Sub-agent: the child runs under its own gate, starting at this run's taint, and its
	// result comes back carrying the child's label (pipeline.Result.Label).
	"spawn_agent": {Known: true},
	// Interaction: ask_operator talks to the person running the agent, who sees the
	// context already.
	"ask_operator": {Known: true},
	// install_tool writes a stamped script in the workdir's .lev/tools: a file tool.
	"install_tool": {Known: true},
}

// Table classifies tools: the built-ins, plus classifications the user's policy gives
// MCP or script tools. The zero value is not usable; use NewTable.
type Table struct {
	classes map[string]Class
	// prefixes classify every tool whose name starts with the key (an MCP server's
	// mcp__SERVER__, classified in the user's config); an exact entry beats them.
	prefixes map[string]Class
}

// WithPrefix returns a copy in which every tool named prefix+… that has no entry of its
// own gets c (Known). Used for the user's per-server MCP classification.
func (t *Table) WithPrefix(prefix string, c Class) *Table {
	n := &Table{classes: t.classes, prefixes: make(map[string]Class, len(t.prefixes)+1)}
	for k, v := range t.prefixes {
		n.prefixes[k] = v
	}
	c.Known = true
	if !c.Outbound {
		c.Clearance = 0
	}
	n.prefixes[prefix] = c
	return n
}

// NewTable returns the built-in table with the user's overrides applied. An override
// gives an MCP or script tool a classification of its own, or changes a built-in's
// clearance; it can never make a built-in outbound tool ungated (the gate and its audit
// would then be skipped for a tool that can send data out).
func NewTable(overrides map[string]Class) *Table {
	t := &Table{classes: make(map[string]Class, len(builtin)+len(overrides))}
	for k, v := range builtin {
		t.classes[k] = v
	}
	for k, v := range overrides {
		v.Known = true
		if b, ok := builtin[k]; ok && b.Outbound {
			v.Outbound = true
		}
		if !v.Outbound {
			v.Clearance = 0
		}
		t.classes[k] = v
	}
	return t
}

// With returns a copy with clearances set. With onlyLower, a clearance can only go down,
// and a tool that is not outbound stays so (a blueprint tightening the user's table); an
// unclassified tool named here becomes outbound with that clearance (never above its
// fail-closed Public when onlyLower).
func (t *Table) With(clearances map[string]Level, onlyLower bool) *Table {
	n := &Table{classes: make(map[string]Class, len(t.classes)+len(clearances)), prefixes: t.prefixes}
	for k, v := range t.classes {
		n.classes[k] = v
	}
	for tool, l := range clearances {
		c := t.Classify(tool)
		if onlyLower {
			if c.Outbound && l < c.Clearance {
				c.Clearance = l
			}
		} else {
			c.Outbound, c.Clearance, c.Known = true, l, true
		}
		n.classes[tool] = c
	}
	return n
}

// Classify returns the class of tool. An unrecognised tool fails closed: outbound, Public
// clearance, Known false.
func (t *Table) Classify(tool string) Class {
	if t != nil {
		if c, ok := t.classes[tool]; ok {
			return c
		}
		best := ""
		for p := range t.prefixes {
			if len(p) > len(best) && len(tool) > len(p) && tool[:len(p)] == p {
				best = p
			}
		}
		if best != "" {
			return t.prefixes[best]
		}
	} else if c, ok := builtin[tool]; ok {
		return c
	}
	return Class{Outbound: true, Clearance: Public, Known: false}
}

// Outbound lists the tools the table gates, sorted.
func (t *Table) Outbound() []string {
	var out []string
	for k, v := range t.classes {
		if v.Outbound {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// ResultInfo is what the runtime knows about a tool result when it labels it.
type ResultInfo struct {
	// ThroughGrant: the read resolved outside the workdir and was let through by a
	// declared and granted [read_paths] entry.
	ThroughGrant bool
	// AgentHasGrant: the agent has at least one active read-path grant. For such an agent
	// the read tools are Private, whatever path a given read hit (docs/lev-security.md,
	// "Labels come from the runtime only").
	AgentHasGrant bool
}

var readTools = map[string]bool{"read_file": true, "read_files": true, "list_dir": true, "glob": true, "grep": true}

var fromOutside = map[string]bool{"web_search": true, "web_fetch": true, "http_get": true, "http_post": true}

// ResultLevel is the label the runtime gives a tool's result when it enters the context.
// Reads through a grant (and any read by an agent holding a grant) are Private; workdir
// reads, shell output and unknown tools' output are Internal; what came from the web is
// Public.
func ResultLevel(tool string, info ResultInfo) Level {
	switch {
	case readTools[tool] && (info.ThroughGrant || info.AgentHasGrant):
		return Private
	case info.ThroughGrant:
		return Private
	case fromOutside[tool]:
		return Public
	}
	return Internal
}
