package pipeline

import (
	"fmt"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/toolcat"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// defaultPermission is a built-in tool's own default (its catalogue row: reading and
// searching, writing in the workdir, the run's own todo list and context, submitting,
// asking the operator and a sub-agent are allowed; anything that runs commands, reaches
// the network or installs a script asks). ok is false for a tool with none (MCP,
// scripts), which asks.
func defaultPermission(tool string) (p blueprint.Permission, ok bool) {
	row, ok := toolcat.Lookup(tool)
	return blueprint.Permission(row.Permission), ok
}

// preAllowable: a tool a blueprint may loosen, and only when the user configured none of
// them (docs/lev.md, "Blueprints": the one narrow exception; web_search and web_fetch).
func preAllowable(tool string) bool {
	row, ok := toolcat.Lookup(tool)
	return ok && row.PreAllowable
}

// Permissions resolves a tool's effective permission for one run.
type Permissions struct {
	User      map[string]blueprint.Permission // config.toml [tool_permissions]
	Blueprint map[string]blueprint.Permission // blueprint [tool_permissions]
	Yolo      bool                            // --yolo: every ask becomes allow
	Allow     map[string]bool                 // --allow TOOL: that tool's ask becomes allow
	// Foreign: the blueprint is from the tree the agents write; it only tightens (the
	// pre-allowed web tools exception is the user's trust in their own blueprints).
	Foreign bool
}

// For returns the effective permission and where it came from.
func (p *Permissions) For(tool string) (blueprint.Permission, string) {
	base, src := blueprint.Ask, "default for tools without one"
	if d, ok := defaultPermission(tool); ok {
		base, src = d, "built-in default"
	}
	u, userSet, ukey := lookupPerm(p.User, tool)
	if userSet {
		base, src = u, "config.toml"
		if ukey != tool {
			src = "config.toml " + ukey
		}
	}
	if b, ok, _ := lookupPerm(p.Blueprint, tool); ok {
		switch {
		case preAllowable(tool) && !userSet && !p.anyUserSetFor() && !p.Foreign:
			base, src = b, "blueprint (pre-allowed: your config sets neither web_search nor web_fetch)"
		case b.Rank() > base.Rank():
			base, src = b, "blueprint tightens "+src
		}
	}
	if base == blueprint.Ask {
		switch {
		case p.Yolo:
			return blueprint.Allow, fmt.Sprintf("%s, ask lifted by --yolo", src)
		case p.Allow[tool]:
			return blueprint.Allow, fmt.Sprintf("%s, ask lifted by --allow %s", src, tool)
		case p.allowsServer(tool) != "":
			return blueprint.Allow, fmt.Sprintf("%s, ask lifted by --allow %s", src, p.allowsServer(tool))
		}
	}
	return base, src
}

// allowsServer is the --allow mcp__SERVER__* that covers an MCP tool, if any (toolnames
// accepts that spelling for --allow, so it must lift something).
func (p *Permissions) allowsServer(tool string) string {
	if server, _, ok := toolnames.SplitMCP(tool); ok {
		if key := toolnames.MCPPrefix + server + "__*"; p.Allow[key] {
			return key
		}
	}
	return ""
}

// lookupPerm finds tool's permission in one [tool_permissions] table: its exact name,
// else, for an MCP tool, its server's mcp__SERVER__* (the only pattern; an exact entry for
// the tool beats it, whichever is stricter). key is the entry that matched.
func lookupPerm(table map[string]blueprint.Permission, tool string) (blueprint.Permission, bool, string) {
	if v, ok := table[tool]; ok {
		return v, true, tool
	}
	if server, _, ok := toolnames.SplitMCP(tool); ok {
		key := toolnames.MCPPrefix + server + "__*"
		if v, ok := table[key]; ok {
			return v, true, key
		}
	}
	return "", false, ""
}

// anyUserSetFor: the exception applies only when the user configured neither tool.
func (p *Permissions) anyUserSetFor() bool {
	for _, t := range toolcat.Tools() {
		if _, ok := p.User[t.Name]; ok && t.PreAllowable {
			return true
		}
	}
	return false
}
