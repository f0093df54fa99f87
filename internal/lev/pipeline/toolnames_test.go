package pipeline

import (
	"sort"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// TestToolNamesMatchRegistry: the names a [tool_permissions] table may set are exactly the
// registered built-ins plus the tools with a default permission. A tool added to one and not the other fails here.
func TestToolNamesMatchRegistry(t *testing.T) {
	want := map[string]bool{}
	for _, n := range Names() {
		want[n] = true
	}
	for n := range Defaults {
		want[n] = true
	}
	var w []string
	for n := range want {
		w = append(w, n)
	}
	sort.Strings(w)
	got := append([]string(nil), toolnames.Builtin...)
	sort.Strings(got)
	if len(got) != len(w) {
		t.Fatalf("toolnames.Builtin = %v, want %v", got, w)
	}
	for i := range w {
		if got[i] != w[i] {
			t.Fatalf("toolnames.Builtin = %v, want %v", got, w)
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
