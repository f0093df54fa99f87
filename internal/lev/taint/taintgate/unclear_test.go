package taintgate

import (
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// TestUnclearTargetsAreNotAllowlisted: an allowlist entry scoped to a target covers only a
// call whose target lev can read as one destination. Each row is a real run (engine,
// scripted model, pipeline, this gate) that reads Private data through a grant and then
// calls a real stdio MCP server classified outbound (clearance internal), under the policy
//
//	[[allow]] tool = "mcp__web__fetch" target = "*.example.com" max_sensitivity = "private"
//	[[allow]] tool = "mcp__web__post"  target = "*"             max_sensitivity = "private"
//
// The attack rows carry a url on which Go's parser and the server's client disagree (Node's
// WHATWG URL sends both to evil.test, while the text matches *.example.com), a call naming
// its target twice, and a call naming none (which `*` matched). Each must be AutoBlocked
// with the server receiving nothing. The controls, a clean URL under the pattern for each
// tool, are allowed by the entry and reach the server, proving the calls get that far.
func TestUnclearTargetsAreNotAllowlisted(t *testing.T) {
	const policy = "[[allow]]\ntool = \"mcp__web__fetch\"\ntarget = \"*.example.com\"\nmax_sensitivity = \"private\"\n" +
		"[[allow]]\ntool = \"mcp__web__post\"\ntarget = \"*\"\nmax_sensitivity = \"private\"\n"
	for _, tc := range []struct {
		name, tool, args string
		allowed          bool
		target           string // the audit record's target
	}{
		{"control: a clean URL under the pattern", "mcp__web__fetch", `{"url": "https://docs.example.com/x"}`, true, "docs.example.com"},
		{"a tab after the host's slash", "mcp__web__fetch", `{"url": "https://evil.test/\t.example.com"}`, false, "https://evil.test/\t.example.com"},
		{"a backslash before userinfo", "mcp__web__fetch", `{"url": "https://evil.test\\@x.example.com"}`, false, `https://evil.test\@x.example.com`},
		{"a space in the path", "mcp__web__fetch", `{"url": "https://evil.test/ .example.com"}`, false, "https://evil.test/ .example.com"},
		{"url and host both given", "mcp__web__fetch", `{"url": "https://docs.example.com/x", "host": "evil.test"}`, false, "url=https://docs.example.com/x host=evil.test"},
		{"no target, pattern *", "mcp__web__post", `{"body": "{{last}}"}`, false, ""},
		{"control: a target under pattern *", "mcp__web__post", `{"url": "https://hooks.example.com/x", "body": "{{last}}"}`, true, "hooks.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LEV_BENCH_SOCKET", "")
			w := newWorld(t)
			w.exec = mcpExec
			log := logFile(t, "web")
			o := w.run(t, runCase{
				tools:   []string{"read_file", "mcp__web__*"},
				script:  strings.ReplaceAll(script("one", tc.tool, tc.args), "HOME", w.home),
				policy:  policy,
				bpExtra: "[mcp]\nservers = [\"web\"]\n",
				config:  stdioServer("web", "web", log, w.wd, "classification = \"outbound\"\nclearance = \"internal\"\n"),
			})
			src, rule := taint.SourceAutoBlock, ""
			if tc.allowed {
				src, rule = taint.SourcePolicyAllow, "allow[0]"
				if tc.tool == "mcp__web__post" {
					rule = "allow[1]"
				}
			}
			checkAudit(t, o.audit, want{tool: tc.tool, sources: []taint.Source{src}, taint: taint.Private, rule: rule})
			rec := calls(o.audit)[0]
			if rec.Target != tc.target {
				t.Errorf("audit target %q, want %q", rec.Target, tc.target)
			}
			if !tc.allowed && tc.target != "" && !strings.Contains(rec.Reason, "unclear") {
				t.Errorf("the reason does not say the target is unclear: %s", rec.Reason)
			}
			got := received(t, log)
			if tc.allowed != strings.Contains(got, strings.TrimPrefix(tc.tool, "mcp__web__")+" ") {
				t.Fatalf("allowed %v, but the server received %q", tc.allowed, got)
			}
		})
	}
}
