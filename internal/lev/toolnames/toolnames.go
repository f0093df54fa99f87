// Package toolnames says which names a [tool_permissions] table (config.toml or a
// blueprint) may set. A misspelt name would otherwise be accepted and change nothing:
// `shel = "deny"` denies nothing while the user believes shell is off.
//
// Valid names are the built-in tools (Builtin: the tool catalogue's, toolcat, which a test
// in package pipeline keeps one-to-one with the tools the pipeline dispatches to) and
// MCP tool names of the form mcp__SERVER__TOOL. MCP tools do not exist in lev yet; when
// they do, each is offered, permitted, gated and recorded under exactly that name, so a
// permission written for one today applies to it then, and no check needs loosening.
//
// It owns the list of valid names. It must not accept a name that nothing would ever
// match.
package toolnames

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/lever-jail/lever/internal/lev/toolcat"
)

// Builtin are lev's built-in tool names, sorted: the tool catalogue's rows.
var Builtin = toolcat.Names()

// MCPPrefix starts every MCP tool name.
const MCPPrefix = "mcp__"

// mcpRe is mcp__SERVER__TOOL: SERVER has no "__" (so the split is unambiguous), TOOL is an
// MCP tool name (letters, digits, _ . -).
var mcpRe = regexp.MustCompile(`^mcp__[A-Za-z0-9](?:[A-Za-z0-9-]|_[A-Za-z0-9-])*__[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// mcpServerWildcardRe is mcp__SERVER__*: every tool of one server.
var mcpServerWildcardRe = regexp.MustCompile(`^mcp__[A-Za-z0-9](?:[A-Za-z0-9-]|_[A-Za-z0-9-])*__\*$`)

// serverRe is an MCP server's name (the SERVER of mcp__SERVER__TOOL): letters, digits,
// '-' and single '_', never doubled or trailing, so the name splits at the first "__".
var serverRe = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]|_[A-Za-z0-9-])*$`)

// CheckServer refuses an MCP server name that would make mcp__SERVER__TOOL ambiguous.
func CheckServer(name string) error {
	if len(name) > 64 || !serverRe.MatchString(name) {
		return fmt.Errorf("bad MCP server name %q: 1-64 letters, digits, - and single _ (not leading or trailing)", name)
	}
	return nil
}

// MCPName is the name an MCP server's tool is offered, permitted, gated and recorded under.
func MCPName(server, tool string) string { return MCPPrefix + server + "__" + tool }

// SplitMCP splits mcp__SERVER__TOOL (or mcp__SERVER__*) at the first "__" after the prefix.
func SplitMCP(name string) (server, tool string, ok bool) {
	rest, found := strings.CutPrefix(name, MCPPrefix)
	if !found {
		return "", "", false
	}
	server, tool, ok = strings.Cut(rest, "__")
	return server, tool, ok && server != "" && tool != ""
}

// IsMCPWildcard reports whether name is mcp__SERVER__* (every tool of one server).
func IsMCPWildcard(name string) bool { return mcpServerWildcardRe.MatchString(name) }

// Check returns nil for a name a [tool_permissions] table may set, else an error saying
// what is wrong and what the valid names are. mcp__SERVER__* (every tool of that server)
// is accepted too; it is the only pattern, and an exact name beats it.
func Check(name string) error {
	if toolcat.Known(name) {
		return nil
	}
	if strings.HasPrefix(name, MCPPrefix) {
		if mcpRe.MatchString(name) || IsMCPWildcard(name) {
			return nil
		}
		return fmt.Errorf("bad MCP tool name %q: MCP tools are named mcp__SERVER__TOOL or mcp__SERVER__* (SERVER: letters, digits, - and single _; TOOL: letters, digits, _ . -)", name)
	}
	msg := fmt.Sprintf("unknown tool %q", name)
	if near := nearest(name); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return fmt.Errorf("%s; the tools are %s, and MCP tools are named mcp__SERVER__TOOL", msg, strings.Join(sorted(), ", "))
}

func sorted() []string {
	s := append([]string(nil), Builtin...)
	sort.Strings(s)
	return s
}

// nearest is the built-in within edit distance 2 of name (case-insensitively), if one is.
func nearest(name string) string {
	best, bestD := "", 3
	for _, b := range sorted() {
		if d := distance(strings.ToLower(name), b); d < bestD {
			best, bestD = b, d
		}
	}
	return best
}

func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur := make([]int, len(rb)+1)
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(rb)]
}
