package taint

import (
	"sort"

	"github.com/lever-jail/lever/internal/lev/toolcat"
)

// Gating is how the gate treats a tool (a tool's class, what it touches, is toolcat's:
// its gating follows from it for a built-in, and from the user's classification for an
// MCP or script tool).
type Gating struct {
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

// builtin is a built-in tool's gating, from its row of the tool catalogue (toolcat):
// every built-in has one, and only the classes that can send bytes off the machine
// (toolcat.Class.Gated: the shell, the network tools, submit_output) are outbound.
func builtin(tool string) (Gating, bool) {
	row, ok := toolcat.Lookup(tool)
	switch {
	case !ok:
		return Gating{}, false
	case row.Gated():
		return Gating{Outbound: true, Clearance: DefaultClearance, Known: true}, true
	}
	return Gating{Known: true}, true
}

// Table classifies tools: the built-ins, plus classifications the user's policy gives
// MCP or script tools. The zero value is not usable; use NewTable.
type Table struct {
	classes map[string]Gating
	// prefixes classify every tool whose name starts with the key (an MCP server's
	// mcp__SERVER__, classified in the user's config); an exact entry beats them.
	prefixes map[string]Gating
}

// WithPrefix returns a copy in which every tool named prefix+… that has no entry of its
// own gets c (Known). Used for the user's per-server MCP classification.
func (t *Table) WithPrefix(prefix string, c Gating) *Table {
	n := &Table{classes: t.classes, prefixes: make(map[string]Gating, len(t.prefixes)+1)}
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
func NewTable(overrides map[string]Gating) *Table {
	t := &Table{classes: make(map[string]Gating, len(overrides))}
	for _, name := range toolcat.Names() {
		t.classes[name], _ = builtin(name)
	}
	for k, v := range overrides {
		v.Known = true
		if b, ok := builtin(k); ok && b.Outbound {
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
	n := &Table{classes: make(map[string]Gating, len(t.classes)+len(clearances)), prefixes: t.prefixes}
	for k, v := range t.classes {
		n.classes[k] = v
	}
	for tool, l := range clearances {
		c := t.Gating(tool)
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

// Gating returns how the gate treats tool. An unrecognised tool fails closed: outbound, Public
// clearance, Known false.
func (t *Table) Gating(tool string) Gating {
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
	} else if c, ok := builtin(tool); ok {
		return c
	}
	return Gating{Outbound: true, Clearance: Public, Known: false}
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

// ResultLevel is the label the runtime gives a tool's result when it enters the context.
// Reads through a grant (and any read by an agent holding a grant) are Private; workdir
// reads, shell output and unknown tools' output are Internal; what came from the web is
// Public.
func ResultLevel(tool string, info ResultInfo) Level {
	row, _ := toolcat.Lookup(tool) // a tool with no row is labelled as a local one
	switch {
	case row.Label == toolcat.LabelFiles && (info.ThroughGrant || info.AgentHasGrant):
		return Private
	case info.ThroughGrant:
		return Private
	case row.Label == toolcat.LabelWeb:
		return Public
	}
	return Internal
}
