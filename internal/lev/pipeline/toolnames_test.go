package pipeline

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/toolcat"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// TestCatalogueMatchesRegistry: every tool the pipeline can dispatch to has exactly one row
// in the tool catalogue, and every row has a tool to dispatch to, so a row for a tool that
// does not exist fails here (as a registered tool without a row panics when the registry
// is built). The names a [tool_permissions] table may set are exactly those.
func TestCatalogueMatchesRegistry(t *testing.T) {
	rows := map[string]int{}
	for _, r := range toolcat.Tools() {
		rows[r.Name]++
	}
	for name := range registry {
		if rows[name] != 1 {
			t.Errorf("tool %s is dispatched to and has %d catalogue rows, want 1", name, rows[name])
		}
	}
	for name, n := range rows {
		if registry[name] == nil {
			t.Errorf("catalogue row %s has no tool to dispatch to", name)
		}
		if n != 1 {
			t.Errorf("tool %s has %d catalogue rows", name, n)
		}
	}
	if got, want := toolnames.Builtin, Names(); !slices.Equal(got, want) {
		t.Errorf("toolnames.Builtin = %v, want the dispatched tools %v", got, want)
	}
	for _, name := range Names() {
		if err := toolnames.Check(name); err != nil {
			t.Errorf("toolnames.Check(%s): %v", name, err)
		}
	}
	// The control: a name with no row is neither dispatched nor a valid permission key.
	if Known("delete_file") || toolnames.Check("delete_file") == nil {
		t.Error("delete_file, which no row names, is known")
	}
}

// TestRegistryTakesTheCatalogue: a registered tool's class and fence are its row's, and the
// permission step's defaults are the rows' (ask for a tool with none).
func TestRegistryTakesTheCatalogue(t *testing.T) {
	p := &Permissions{}
	for _, r := range toolcat.Tools() {
		tool := registry[r.Name]
		if tool == nil {
			continue // TestCatalogueMatchesRegistry says so
		}
		if tool.Class != r.Class || tool.fence != r.Fence {
			t.Errorf("%s: registered as class %q fence %q, its row says %q %q", r.Name, tool.Class, tool.fence, r.Class, r.Fence)
		}
		if got, src := p.For(r.Name); string(got) != string(r.Permission) || src != "built-in default" {
			t.Errorf("%s: default permission %s (%s), its row says %s", r.Name, got, src, r.Permission)
		}
	}
	if got, src := p.For("mcp__x__y"); got != blueprint.Ask || src != "default for tools without one" {
		t.Errorf("a tool with no row: %s (%s), want ask", got, src)
	}
}

// TestCapsColumnMatchesDocs: the caps each catalogue row names are rows of docs/lev.md's
// "Tool caps" table, and a tool that a cap's "Bounds" cell names lists that cap in its row
// (so the table and the catalogue say the same about which cap bounds which tool).
func TestCapsColumnMatchesDocs(t *testing.T) {
	data, err := os.ReadFile("../../../docs/lev.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "### Tool caps\n")
	if !ok {
		t.Fatal(`docs/lev.md has no "### Tool caps" section`)
	}
	section, _, _ = strings.Cut(section, "\n#")
	name := regexp.MustCompile("`([A-Za-z_]+)`")
	bounds := map[string]string{} // cap -> its Bounds cell
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`Max") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			bounds[m[1]] = cells[3]
		}
	}
	if len(bounds) < 10 {
		t.Fatalf("read %d caps from docs/lev.md's table, want its ~17 rows: %v", len(bounds), bounds)
	}
	for _, r := range toolcat.Tools() {
		for _, c := range r.Caps {
			if _, ok := bounds[c]; !ok {
				t.Errorf("%s: cap %s is not a row of docs/lev.md's Tool caps table", r.Name, c)
			}
		}
	}
	for c, cell := range bounds {
		for _, m := range name.FindAllStringSubmatch(cell, -1) {
			r, ok := toolcat.Lookup(m[1])
			if ok && !slices.Contains(r.Caps, c) {
				t.Errorf("docs/lev.md: %s bounds %s, whose catalogue row does not list it (%v)", c, r.Name, r.Caps)
			}
		}
	}
}

// TestMCPPermissions: [tool_permissions] takes exact MCP names and mcp__SERVER__*; an
// exact entry beats its server's wildcard (either way), a wildcard reaches only its own
// server, and the blueprint still only tightens.
func TestMCPPermissions(t *testing.T) {
	p := &Permissions{
		User: map[string]blueprint.Permission{
			"mcp__fs__*": blueprint.Deny, "mcp__fs__read_text_file": blueprint.Allow,
			"mcp__web__*": blueprint.Allow, "mcp__web__post": blueprint.Deny,
		},
		Blueprint: map[string]blueprint.Permission{"mcp__web__*": blueprint.Ask, "mcp__fs__read_text_file": blueprint.Allow},
		Allow:     map[string]bool{"mcp__lift__*": true},
	}
	for _, tc := range []struct {
		tool string
		want blueprint.Permission
		src  string
	}{
		{"mcp__fs__read_text_file", blueprint.Allow, "config.toml"},
		{"mcp__fs__write_file", blueprint.Deny, "config.toml mcp__fs__*"},
		{"mcp__web__post", blueprint.Deny, "config.toml"},
		{"mcp__web__get", blueprint.Ask, "blueprint tightens config.toml mcp__web__*"},
		{"mcp__fsx__read", blueprint.Ask, "default for tools without one"},
		{"mcp__f__s__x", blueprint.Ask, "default for tools without one"},
		{"mcp__lift__anything", blueprint.Allow, "default for tools without one, ask lifted by --allow mcp__lift__*"},
		{"mcp__fs__write_file", blueprint.Deny, "config.toml mcp__fs__*"}, // --allow never lifts a deny
		{"mcp__lifted__x", blueprint.Ask, "default for tools without one"},
	} {
		got, src := p.For(tc.tool)
		if got != tc.want || src != tc.src {
			t.Errorf("%s: %s (%s), want %s (%s)", tc.tool, got, src, tc.want, tc.src)
		}
	}
}
