package blueprint

import (
	"strings"
	"testing"
)

// TestMCPDeclarations: a blueprint's [mcp] servers and its stages' MCP tools are strict
// (each refusal names the key and line); the controls load.
func TestMCPDeclarations(t *testing.T) {
	head := "name = \"a\"\nversion = \"1\"\n"
	cases := []struct {
		name, text, want string
	}{
		{"control: wildcard and exact", "[mcp]\nservers = [\"fs\", \"web\"]\n[stages.s]\ntools = [\"mcp__fs__*\", \"mcp__web__fetch\"]\n", ""},
		{"undeclared server's tool", "[mcp]\nservers = [\"fs\"]\n[stages.s]\ntools = [\"mcp__web__fetch\"]\n", `a.toml:6: key "stages.s.tools": tool "mcp__web__fetch": server "web" is not declared in [mcp] servers`},
		{"no [mcp] at all", "[stages.s]\ntools = [\"mcp__fs__*\"]\n", `key "stages.s.tools": tool "mcp__fs__*": server "fs" is not declared in [mcp] servers`},
		{"bad pattern", "[mcp]\nservers = [\"fs\"]\n[stages.s]\ntools = [\"mcp__fs__read*\"]\n", `key "stages.s.tools": bad MCP tool name "mcp__fs__read*"`},
		{"bad server name", "[mcp]\nservers = [\"a__b\"]\n[stages.s]\n", `a.toml:4: key "mcp.servers": bad MCP server name "a__b"`},
		{"server twice", "[mcp]\nservers = [\"fs\", \"fs\"]\n[stages.s]\n", `key "mcp.servers": server "fs" listed twice`},
		{"unknown key", "[mcp]\nserver = [\"fs\"]\n[stages.s]\n", `a.toml:4: unknown key "mcp.server"`},
		{"server wildcard in clearances", "[taint_tracking]\nclearances = { \"mcp__fs__*\" = \"public\" }\n[stages.s]\n", `key "taint_tracking.clearances.mcp__fs__*": clearances name exact tools; set a whole MCP server's clearance in config.toml's [mcp.servers.fs]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bp, err := Parse("a.toml", []byte(head+tc.text), func(string) bool { return true })
			if tc.want == "" {
				if err != nil || !bp.Declares("fs") || bp.Declares("slack") {
					t.Fatalf("control: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant %q", err, tc.want)
			}
		})
	}
}
