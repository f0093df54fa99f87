// Package blueprint loads lev agent blueprints: one strict TOML file per agent. Unknown
// keys and bad values fail the load with an error naming the key and its line.
//
// It owns the blueprint schema, loading and validation. It must not grant anything: a
// blueprint declares (read paths, MCP servers, permissions it tightens) and only the
// user's config.toml grants.
package blueprint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/lever-jail/lever/internal/lev/readpaths"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/tomlx"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// Permission is a [tool_permissions] value.
type Permission string

const (
	Allow Permission = "allow"
	Ask   Permission = "ask"
	Deny  Permission = "deny"
)

// Rank orders permissions by strictness: a blueprint may only move a tool up this order.
func (p Permission) Rank() int {
	switch p {
	case Allow:
		return 0
	case Ask:
		return 1
	}
	return 2
}

// ParsePermission accepts allow, ask or deny.
func ParsePermission(s string) (Permission, error) {
	switch Permission(s) {
	case Allow, Ask, Deny:
		return Permission(s), nil
	}
	return "", fmt.Errorf("bad permission %q (want allow, ask or deny)", s)
}

// TaintTracking is a [taint_tracking] table (blueprint or config).
type TaintTracking struct {
	Enabled *bool `toml:"enabled"`
	// OnViolation is what the gate does with data above a tool's clearance: ask (default),
	// deny or allow.
	OnViolation string `toml:"on_violation"`
	// Clearances sets a tool's clearance: public, internal or private.
	Clearances map[string]string `toml:"clearances"`
}

// ReadPaths is the [read_paths] table.
type ReadPaths struct {
	Allow []string `toml:"allow"`
}

// Seed puts content into a run's first context. Exactly one of File, Glob or Script.
// Paths are relative to the workdir; a "blueprint:" prefix reads from the blueprint's own
// directory and nowhere else.
type Seed struct {
	File   string `toml:"file"`
	Glob   string `toml:"glob"`
	Script string `toml:"script"`
}

// Stage is one [stages.NAME] table.
type Stage struct {
	Name     string          `toml:"-"`
	Prompt   string          `toml:"prompt"`
	Tools    []string        `toml:"tools"`
	MaxTurns int             `toml:"max_turns"`
	Sandbox  *sandbox.Config `toml:"sandbox"`
}

// Blueprint is one agent.
type Blueprint struct {
	Name            string            `toml:"name"`
	Version         string            `toml:"version"`
	Description     string            `toml:"description"`
	Model           string            `toml:"model"`
	SystemPrompt    string            `toml:"system_prompt"`
	ToolPermissions map[string]string `toml:"tool_permissions"`
	ReadPaths       ReadPaths         `toml:"read_paths"`
	Sandbox         *sandbox.Config   `toml:"sandbox"`
	TaintTracking   *TaintTracking    `toml:"taint_tracking"`
	Seeds           []Seed            `toml:"seeds"`
	Stages          map[string]*Stage `toml:"stages"`
	MCP             MCPDecl           `toml:"mcp"`

	// Derived at load.
	File     string                `toml:"-"`
	Dir      string                `toml:"-"`
	Order    []*Stage              `toml:"-"` // stages in file order
	Declared []readpaths.Entry     `toml:"-"`
	Perms    map[string]Permission `toml:"-"`
	// Installed is the name the file is installed under in the agents directory (see
	// InstallName), set by Install; "" for a blueprint run by its path. Per-agent grants
	// are keyed on it.
	Installed string `toml:"-"`
	// Foreign marks a blueprint from the tree the agents write (MakeForeign): it gets no
	// read-path grant and cannot loosen a permission.
	Foreign bool `toml:"-"`
}

// MCPDecl is a blueprint's [mcp] table: the MCP servers the agent wants. Declaring is not
// granting: only a server config.toml names ([mcp.servers.NAME]) can start.
type MCPDecl struct {
	Servers []string `toml:"servers"`
}

// Declares reports whether the blueprint declares server.
func (bp *Blueprint) Declares(server string) bool {
	for _, s := range bp.MCP.Servers {
		if s == server {
			return true
		}
	}
	return false
}

// DefaultMaxTurns bounds a stage's model turns when the blueprint does not.
const DefaultMaxTurns = 40

var nameRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$`)

// ParsePermissions validates a [tool_permissions] table (config.toml's or a blueprint's):
// every key a tool name (toolnames.Check: a built-in, or mcp__SERVER__TOOL), every value
// allow, ask or deny. Keys are checked in document order, so the first bad one is named
// with its line.
func ParsePermissions(doc *tomlx.Doc, table map[string]string) (map[string]Permission, error) {
	tools := make([]string, 0, len(table))
	for t := range table {
		tools = append(tools, t)
	}
	sort.Slice(tools, func(i, j int) bool {
		li, lj := doc.Line("tool_permissions."+tools[i]), doc.Line("tool_permissions."+tools[j])
		if li != lj {
			return li < lj
		}
		return tools[i] < tools[j]
	})
	out := map[string]Permission{}
	for _, tool := range tools {
		key := "tool_permissions." + tool
		if err := toolnames.Check(tool); err != nil {
			return nil, doc.Errorf(key, "%v", err)
		}
		p, err := ParsePermission(table[tool])
		if err != nil {
			return nil, doc.Errorf(key, "%v", err)
		}
		out[tool] = p
	}
	return out, nil
}

// Load reads and validates a blueprint file. known reports whether a tool name exists.
func Load(file string, known func(string) bool) (*Blueprint, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading blueprint: %w", err)
	}
	return Parse(file, data, known)
}

// Parse validates blueprint text.
func Parse(file string, data []byte, known func(string) bool) (*Blueprint, error) {
	bp := &Blueprint{}
	doc, err := tomlx.Decode(file, data, bp)
	if err != nil {
		return nil, err
	}
	bp.File = file
	bp.Dir = filepath.Dir(file)
	if bp.Name == "" {
		return nil, fmt.Errorf("%s: key \"name\" is required", file)
	}
	if !nameRe.MatchString(bp.Name) {
		return nil, doc.Errorf("name", "bad agent name %q (letters, digits, _ . -)", bp.Name)
	}
	if bp.Version == "" {
		return nil, fmt.Errorf("%s: key \"version\" is required", file)
	}
	if len(bp.Stages) == 0 {
		return nil, fmt.Errorf("%s: at least one [stages.NAME] table is required", file)
	}
	if bp.Perms, err = ParsePermissions(doc, bp.ToolPermissions); err != nil {
		return nil, err
	}
	for i, raw := range bp.ReadPaths.Allow {
		e, err := readpaths.Parse(raw)
		if err != nil {
			return nil, doc.Errorf("read_paths.allow", "entry %d: %v", i+1, err)
		}
		bp.Declared = append(bp.Declared, e)
	}
	if err := CheckSandbox(doc, "sandbox", bp.Sandbox); err != nil {
		return nil, err
	}
	if err := CheckTaint(doc, "taint_tracking", bp.TaintTracking); err != nil {
		return nil, err
	}
	for i, s := range bp.Seeds {
		n := 0
		for _, v := range []string{s.File, s.Glob, s.Script} {
			if v != "" {
				n++
			}
		}
		if n != 1 {
			return nil, doc.Errorf("seeds", "seed %d: set exactly one of file, glob or script", i+1)
		}
	}
	seenServer := map[string]bool{}
	for _, srv := range bp.MCP.Servers {
		if err := toolnames.CheckServer(srv); err != nil {
			return nil, doc.Errorf("mcp.servers", "%v", err)
		}
		if seenServer[srv] {
			return nil, doc.Errorf("mcp.servers", "server %q listed twice", srv)
		}
		seenServer[srv] = true
	}
	for name, st := range bp.Stages {
		key := "stages." + name
		if st == nil {
			return nil, doc.Errorf(key, "empty stage")
		}
		st.Name = name
		if !nameRe.MatchString(name) {
			return nil, doc.Errorf(key, "bad stage name %q", name)
		}
		if st.MaxTurns < 0 {
			return nil, doc.Errorf(key+".max_turns", "must be positive, got %d", st.MaxTurns)
		}
		if st.MaxTurns == 0 {
			st.MaxTurns = DefaultMaxTurns
		}
		seen := map[string]bool{}
		for _, t := range st.Tools {
			if strings.HasPrefix(t, toolnames.MCPPrefix) {
				// mcp__SERVER__TOOL or mcp__SERVER__*, of a server the blueprint declares.
				if err := toolnames.Check(t); err != nil {
					return nil, doc.Errorf(key+".tools", "%v", err)
				}
				if srv, _, _ := toolnames.SplitMCP(t); !seenServer[srv] {
					return nil, doc.Errorf(key+".tools", "tool %q: server %q is not declared in [mcp] servers", t, srv)
				}
			} else if known != nil && !known(t) {
				return nil, doc.Errorf(key+".tools", "unknown tool %q", t)
			}
			if seen[t] {
				return nil, doc.Errorf(key+".tools", "tool %q listed twice", t)
			}
			seen[t] = true
		}
		if err := CheckSandbox(doc, key+".sandbox", st.Sandbox); err != nil {
			return nil, err
		}
		bp.Order = append(bp.Order, st)
	}
	// Stages run in the order the file lists them.
	sort.SliceStable(bp.Order, func(i, j int) bool {
		return doc.Line("stages."+bp.Order[i].Name) < doc.Line("stages."+bp.Order[j].Name)
	})
	return bp, nil
}

// CheckSandbox validates a [sandbox] table's values (its keys are already strict).
func CheckSandbox(doc *tomlx.Doc, key string, c *sandbox.Config) error {
	if c == nil {
		return nil
	}
	switch c.Kind {
	case "", "container", "namespace", "none":
	default:
		return doc.Errorf(key+".kind", "bad sandbox kind %q (want container, namespace or none)", c.Kind)
	}
	switch c.OnUnavailable {
	case "", "error", "warn":
	default:
		return doc.Errorf(key+".on_unavailable", "bad value %q (want error or warn)", c.OnUnavailable)
	}
	if c.Mount != "" && len(c.Mounts) > 0 {
		return doc.Errorf(key+".mounts", "set mount or mounts, not both")
	}
	// The sandbox package's own value checks (mount syntax, engine and image names).
	if err := c.Validate(); err != nil {
		var fe *sandbox.FieldError
		if errors.As(err, &fe) {
			field, _, _ := strings.Cut(fe.Key, "[")
			return doc.Errorf(key+"."+field, "%s: %s", fe.Key, fe.Msg)
		}
		return doc.Errorf(key, "%v", err)
	}
	return nil
}

// CheckTaint validates a [taint_tracking] table's values.
func CheckTaint(doc *tomlx.Doc, key string, t *TaintTracking) error {
	if t == nil {
		return nil
	}
	if t.OnViolation != "" {
		if _, err := ParsePermission(t.OnViolation); err != nil {
			return doc.Errorf(key+".on_violation", "%v", err)
		}
	}
	for tool, lvl := range t.Clearances {
		if toolnames.IsMCPWildcard(tool) {
			// A clearance is per tool: a pattern here would match nothing, silently.
			return doc.Errorf(key+".clearances."+tool, "clearances name exact tools; set a whole MCP server's clearance in config.toml's [mcp.servers.%s]", strings.TrimSuffix(strings.TrimPrefix(tool, toolnames.MCPPrefix), "__*"))
		}
		if _, err := taint.ParseLevel(lvl); err != nil {
			return doc.Errorf(key+".clearances."+tool, "%v", err)
		}
	}
	return nil
}

// Find locates an agent's blueprint: a path to a .toml file, or NAME under dir as
// NAME.toml or NAME/blueprint.toml.
func Find(dir, agent string) (string, error) {
	if strings.HasSuffix(agent, ".toml") || strings.ContainsRune(agent, '/') {
		if _, err := os.Stat(agent); err != nil {
			return "", fmt.Errorf("blueprint %s: %w", agent, err)
		}
		return filepath.Abs(agent)
	}
	if !nameRe.MatchString(agent) {
		return "", fmt.Errorf("bad agent name %q", agent)
	}
	for _, p := range []string{filepath.Join(dir, agent+".toml"), filepath.Join(dir, agent, "blueprint.toml")} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no blueprint for agent %q in %s (want %s.toml or %s/blueprint.toml)", agent, dir, agent, agent)
}
