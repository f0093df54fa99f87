package mcprun_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/mcp"
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"
)

// TestToolDescription: what the model is offered of a server tool's description: the first
// 4 KiB, cut on a character boundary (a cut through a character used to hand the provider
// invalid UTF-8), whole when it fits; a tool mcp listed as refused (over a cap on
// tools/list) is not made a pipeline tool, with mcp's reason.
func TestToolDescription(t *testing.T) {
	cfg := &levconfig.MCPServer{Name: "srv"}
	x := strings.Repeat("x", 4095)
	for _, tc := range []struct {
		name, desc, want string
	}{
		{"control: 4 KiB whole", x + "y", "[MCP server srv] " + x + "y"},
		{"ASCII past 4 KiB", x + "yz", "[MCP server srv] " + x + "y…"},
		{"a character across the cut", x + "é", "[MCP server srv] " + x + "…"},
		{"a 4-byte character across the cut", x[:4094] + "😀", "[MCP server srv] " + x[:4094] + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt, err := mcprun.Tool(nil, cfg, mcp.Tool{Name: "t", Description: tc.desc})
			if err != nil {
				t.Fatal(err)
			}
			if pt.Description != tc.want || !utf8.ValidString(pt.Description) {
				t.Fatalf("description ends %q (%d bytes, valid UTF-8 %v), want it to end %q",
					pt.Description[len(pt.Description)-8:], len(pt.Description), utf8.ValidString(pt.Description), tc.want[len(tc.want)-8:])
			}
		})
	}
	const why = `MCP server srv offers the tool "big" with a description of 65537 bytes, over lev's cap of 64 KiB on a tool's description: not offered`
	if pt, err := mcprun.Tool(nil, cfg, mcp.Tool{Name: "big", Refused: why}); pt != nil || err == nil || err.Error() != why {
		t.Fatalf("refused tool: %v, %v", pt, err)
	}
}
