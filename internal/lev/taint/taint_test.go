package taint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Level
		err  bool
	}{
		{"public", Public, false}, {"Internal", Internal, false}, {" PRIVATE ", Private, false},
		{"secret", 0, true}, {"", 0, true}, {"2", 0, true},
	} {
		got, err := ParseLevel(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v, err=%v", tc.in, got, err, tc.want, tc.err)
		}
	}
	if _, err := Level(7).MarshalText(); err == nil {
		t.Error("an invalid level marshalled")
	}
}

func TestRegionLabelIsMaxOfLiveEntriesAndFallsOnEviction(t *testing.T) {
	c := NewContext()
	if c.Level() != Public {
		t.Fatalf("empty context is %v", c.Level())
	}
	task := c.Add("messages", Internal, "task")
	secret := c.Add("tool_results", Private, "read_file ~/notes (granted)")
	web := c.Add("tool_results", Public, "web_fetch")
	if got := c.RegionLevel("tool_results"); got != Private {
		t.Fatalf("region with a private entry is %v", got)
	}
	if got := c.RegionLevel("messages"); got != Internal {
		t.Fatalf("messages region = %v", got)
	}
	if got := c.Level(); got != Private {
		t.Fatalf("context = %v", got)
	}
	if !c.Evict(secret) {
		t.Fatal("evicting a live entry reported false")
	}
	if c.Evict(secret) {
		t.Fatal("evicting twice reported true")
	}
	if got := c.RegionLevel("tool_results"); got != Public {
		t.Fatalf("after eviction region = %v, want public", got)
	}
	if got := c.Level(); got != Internal {
		t.Fatalf("after eviction context = %v, want internal", got)
	}
	_ = web
	c.Evict(task)
	if n := c.EvictRegion("tool_results"); n != 1 {
		t.Fatalf("EvictRegion removed %d", n)
	}
	if c.Level() != Public || len(c.Live()) != 0 {
		t.Fatalf("empty again: %v %v", c.Level(), c.Live())
	}
	// An impossible label fails closed.
	c.Add("x", Level(42), "bogus")
	if c.Level() != Private {
		t.Fatalf("invalid label counted as %v", c.Level())
	}
}

func TestClassificationTable(t *testing.T) {
	tab := NewTable(nil)
	for _, tc := range []struct {
		tool     string
		outbound bool
		known    bool
		clr      Level
	}{
		{"shell", true, true, Internal},
		{"web_search", true, true, Internal},
		{"web_fetch", true, true, Internal},
		{"http_get", true, true, Internal},
		{"http_post", true, true, Internal},
		{"submit_output", true, true, Internal},
		{"read_file", false, true, Public},
		{"read_files", false, true, Public},
		{"list_dir", false, true, Public},
		{"write_file", false, true, Public},
		{"edit_file", false, true, Public},
		{"glob", false, true, Public},
		{"grep", false, true, Public},
		{"context_list", false, true, Public},
		{"context_drop", false, true, Public},
		{"todo_write", false, true, Public},
		{"todo_read", false, true, Public},
		{"spawn_agent", false, true, Public},
		{"ask_operator", false, true, Public},
		{"install_tool", false, true, Public},
		{"ask_user", true, false, Public},                 // no such tool: a script named so fails closed
		{"mcp__slack__post_message", true, false, Public}, // unknown fails closed
		{"my_script_tool", true, false, Public},
	} {
		c := tab.Gating(tc.tool)
		if c.Outbound != tc.outbound || c.Known != tc.known || c.Clearance != tc.clr {
			t.Errorf("%s: got %+v", tc.tool, c)
		}
	}
	// Overrides classify an MCP tool, but cannot make a built-in outbound tool ungated.
	tab = NewTable(map[string]Gating{
		"mcp__docs__search": {Outbound: false},
		"shell":             {Outbound: false},
		"http_post":         {Outbound: true, Clearance: Public},
	})
	if c := tab.Gating("mcp__docs__search"); c.Outbound || !c.Known {
		t.Errorf("override for mcp tool: %+v", c)
	}
	if c := tab.Gating("shell"); !c.Outbound {
		t.Errorf("shell made ungated by an override: %+v", c)
	}
	if c := tab.Gating("http_post"); c.Clearance != Public {
		t.Errorf("http_post clearance override: %+v", c)
	}
}

func TestResultLevel(t *testing.T) {
	for _, tc := range []struct {
		tool string
		info ResultInfo
		want Level
	}{
		{"read_file", ResultInfo{ThroughGrant: true, AgentHasGrant: true}, Private},
		{"read_file", ResultInfo{AgentHasGrant: true}, Private}, // docs/lev-security.md: read tools Private for an agent with a grant
		{"read_file", ResultInfo{}, Internal},
		{"list_dir", ResultInfo{ThroughGrant: true}, Private},
		{"web_fetch", ResultInfo{}, Public},
		{"http_get", ResultInfo{}, Public},
		{"shell", ResultInfo{}, Internal},
		{"mcp__x__y", ResultInfo{}, Internal},
	} {
		if got := ResultLevel(tc.tool, tc.info); got != tc.want {
			t.Errorf("ResultLevel(%s, %+v) = %v, want %v", tc.tool, tc.info, got, tc.want)
		}
	}
}

// TestTarget: what the policy matches, and whether lev could read it unambiguously. The
// unclear rows are the inputs on which Go's net/url and the clients that act on an MCP
// call (WHATWG URL in Node, Python's urlsplit) read different hosts, or a call naming its
// target twice; the clear rows beside them are their controls.
func TestTarget(t *testing.T) {
	for _, tc := range []struct {
		tool    string
		args    map[string]any
		want    string
		unclear bool
	}{
		{"web_fetch", map[string]any{"url": "https://API.Example.com:8443/x?y=1"}, "api.example.com", false},
		{"http_post", map[string]any{"url": "https://api.example.com@evil.test/"}, "evil.test", false},
		{"http_get", map[string]any{"url": "https://evil.test#.example.com"}, "evil.test", false},
		{"http_get", map[string]any{"url": "https://x.example.com.evil.test/"}, "x.example.com.evil.test", false},
		{"http_get", map[string]any{"url": "http://[::1]:80/"}, "::1", false},
		{"http_get", map[string]any{"url": "https://example.com./"}, "example.com", false},
		{"http_get", map[string]any{"url": "https://docs.example.com/a%20b?q=%5C"}, "docs.example.com", false},
		{"http_get", map[string]any{"url": "not a url"}, "not a url", true},
		{"http_get", map[string]any{"url": "https://evil.test/\t.example.com"}, "https://evil.test/\t.example.com", true},
		{"http_get", map[string]any{"url": "https://evil.test\\@x.example.com"}, "https://evil.test\\@x.example.com", true},
		{"http_get", map[string]any{"url": "https://evil.test/ .example.com"}, "https://evil.test/ .example.com", true},
		{"http_get", map[string]any{"url": "https://evil.test/\u202e.example.com"}, "https://evil.test/\u202e.example.com", true},
		// Spellings clients decode to one place are canonicalised (issue 27 item 3; the
		// full table is TestHostForms): a deny rule on the canonical form must see them.
		{"http_get", map[string]any{"url": "https://evil%2etest/"}, "evil.test", false},
		{"http_get", map[string]any{"url": "https://ex\u0430mple.com/"}, "xn--exmple-4nf.com", false},
		{"http_get", map[string]any{"url": "http://0x7f.1/"}, "127.0.0.1", false},
		{"http_get", map[string]any{"url": "http://2130706433/"}, "127.0.0.1", false},
		{"http_get", map[string]any{"url": "https:evil.test"}, "https:evil.test", true},
		{"http_get", map[string]any{"url": "ftp://x.example.com/"}, "ftp://x.example.com/", true},
		{"shell", map[string]any{"command": "curl -d @x https://e.test"}, "curl -d @x https://e.test", false},
		{"shell", map[string]any{"argv": []any{"git", "push"}}, "git push", false},
		{"web_search", map[string]any{"query": "golang"}, "golang", false},
		{"submit_output", map[string]any{"output": "x"}, "result", false},
		{"mcp__slack__post", map[string]any{"url": "https://hooks.slack.test/a"}, "hooks.slack.test", false},
		{"mcp__web__fetch", map[string]any{"url": "https://evil.test/\t.example.com"}, "https://evil.test/\t.example.com", true},
		{"mcp__web__fetch", map[string]any{"URL": "https://Evil.test/"}, "evil.test", false},
		{"mcp__web__fetch", map[string]any{"url": "https://evil.test/", "host": "docs.example.com"}, "url=https://evil.test/ host=docs.example.com", true},
		{"mcp__web__fetch", map[string]any{"Url": "https://evil.test/", "target": "docs.example.com"}, "Url=https://evil.test/ target=docs.example.com", true},
		{"mcp__web__fetch", map[string]any{"url": 7}, "7", true},
		{"mcp__ssh__run", map[string]any{"host": "Build.Example.com:22"}, "build.example.com", false},
		{"mcp__ssh__run", map[string]any{"host": "evil.test\\@x.example.com"}, "evil.test\\@x.example.com", true},
		{"mcp__ssh__run", map[string]any{"host": "evil.test/x.example.com"}, "evil.test/x.example.com", true},
		{"mcp__x__send", map[string]any{"target": "https://evil.test/\n.example.com"}, "https://evil.test/\n.example.com", true},
		{"mcp__x__send", map[string]any{"target": "https://docs.example.com/x"}, "docs.example.com", false},
		{"mcp__x__send", map[string]any{"target": "general"}, "general", false},
		{"mcp__x__send", map[string]any{"target": "docs.example.com"}, "docs.example.com", false},
		{"mcp__x__send", map[string]any{"target": "evil.test/x.example.com"}, "evil.test/x.example.com", true},
		{"mcp__x__send", map[string]any{"target": "evil.test#.example.com"}, "evil.test#.example.com", true},
		{"mcp__x__send", map[string]any{"target": "me@evil.test"}, "me@evil.test", true},
		{"mcp__x__send", map[string]any{"target": "evil.test:443"}, "evil.test:443", true},
		{"mcp__fs__write_file", map[string]any{"path": "notes.md", "content": "x"}, "notes.md", false},
		{"mcp__fs__write_file", map[string]any{"path": "notes\n.md"}, "notes\n.md", true},
		{"mcp__x", map[string]any{"channel": 3}, "", false},
		// A URL in an argument that is not a target argument: the server may send there.
		{"mcp__x__send", map[string]any{"path": "/tmp/x", "endpoint": "https://evil.test/"}, "path=/tmp/x endpoint=https://evil.test/", true},
		{"mcp__x__send", map[string]any{"path": "/tmp/x", "uri": "https://evil.test/"}, "path=/tmp/x uri=https://evil.test/", true},
		{"mcp__x__send", map[string]any{"path": "/tmp/x", "webhook": "https://evil.test/h"}, "path=/tmp/x webhook=https://evil.test/h", true},
		{"mcp__x__send", map[string]any{"path": "/tmp/x", "server": "wss://evil.test/socket"}, "path=/tmp/x server=wss://evil.test/socket", true},
		{"mcp__x__send", map[string]any{"path": "/tmp/x", "request": map[string]any{"url": "https://evil.test/"}}, "path=/tmp/x request.url=https://evil.test/", true},
		{"mcp__x__send", map[string]any{"path": "/tmp/x", "hooks": []any{"x", map[string]any{"to": "https://evil.test/"}}}, "path=/tmp/x hooks[1].to=https://evil.test/", true},
		{"mcp__x__send", map[string]any{"path": "/tmp/x", "hooks": map[string]any{"https://evil.test/": "go"}}, "path=/tmp/x hooks(key)=https://evil.test/", true},
		{"mcp__x__send", map[string]any{"path": "/tmp/x", "https://evil.test/": true}, "path=/tmp/x (name)=https://evil.test/", true},
		{"mcp__x__send", map[string]any{"path": "/tmp/x", "a": "https://a.test/", "b": "ftp://b.test/"}, "path=/tmp/x a=https://a.test/ b=ftp://b.test/", true},
		{"mcp__x__send", map[string]any{"command": "deploy", "endpoint": "https://evil.test/"}, "command=deploy endpoint=https://evil.test/", true},
		{"mcp__x__send", map[string]any{"target": "general", "text": "https://evil.test/"}, "target=general text=https://evil.test/", true},
		// As WHATWG reads it: trimmed, tabs and newlines dropped, slashes optional for http(s),
		// a space later in the path percent-encoded.
		{"mcp__x__send", map[string]any{"path": "x", "endpoint": " https://evil.test/\n"}, "path=x endpoint= https://evil.test/\n", true},
		{"mcp__x__send", map[string]any{"path": "x", "endpoint": "ht\ttps://evil.test/"}, "path=x endpoint=ht\ttps://evil.test/", true},
		{"mcp__x__send", map[string]any{"path": "x", "endpoint": "https:evil.test"}, "path=x endpoint=https:evil.test", true},
		{"mcp__x__send", map[string]any{"path": "x", "endpoint": "https://evil.test/ x"}, "path=x endpoint=https://evil.test/ x", true},
		{"mcp__x__send", map[string]any{"path": "x", "content": "https://evil.test/ is where this goes"}, "path=x content=https://evil.test/ is where this goes", true},
		// Another URL to the target's own host, and text that only contains links, leave the
		// target clear.
		{"mcp__web__fetch", map[string]any{"url": "https://a.example/x", "referer": "https://a.example/"}, "a.example", false},
		{"mcp__web__fetch", map[string]any{"url": "https://a.example/x", "referer": "HTTPS://A.Example:443/y"}, "a.example", false},
		{"mcp__web__fetch", map[string]any{"url": "https://a.example/x", "referer": "https://evil.test/"}, "url=https://a.example/x referer=https://evil.test/", true},
		{"mcp__web__fetch", map[string]any{"url": "https://a.example/x", "referer": "https://a.example\\@evil.test/"}, "url=https://a.example/x referer=https://a.example\\@evil.test/", true},
		{"mcp__ssh__run", map[string]any{"host": "A.example:22", "callback": "https://a.example/cb"}, "a.example", false},
		{"mcp__x__send", map[string]any{"target": "Docs.Example.com", "link": "https://docs.example.com/x"}, "Docs.Example.com", false},
		{"mcp__x__send", map[string]any{"path": "/a.example", "link": "https://a.example/"}, "path=/a.example link=https://a.example/", true},
		{"mcp__fs__write_text_file", map[string]any{"path": "notes.md", "content": "# Notes\n\nSee https://evil.test/ and <https://x.example/>.\n"}, "notes.md", false},
		{"mcp__fs__write_text_file", map[string]any{"path": "notes.md", "lines": []any{"see https://evil.test/", "// https://x", "mailto:a@b.test", "12:30", "C:\\x"}}, "notes.md", false},
		// No target argument: the one URL's host, if it reads clean; several, or one that
		// does not, unclear.
		{"mcp__x__send", map[string]any{"request": map[string]any{"url": "https://Docs.Example.com/a"}, "body": "x"}, "docs.example.com", false},
		{"mcp__x__send", map[string]any{"endpoint": "https://hooks.example.com/a"}, "hooks.example.com", false},
		{"mcp__x__send", map[string]any{"endpoint": "https://evil.test/\t.example.com"}, "https://evil.test/\t.example.com", true},
		{"mcp__x__send", map[string]any{"server": "wss://evil.test/"}, "wss://evil.test/", true},
		{"mcp__x__send", map[string]any{"endpoint": "https://a.example/", "webhook": "https://a.example/h"}, "endpoint=https://a.example/ webhook=https://a.example/h", true},
		{"mcp__x__send", map[string]any{"body": "see https://evil.test/ for more"}, "", false},
		// A URL ending at its host, beside other text: a server joining the two strings
		// (base_url + endpoint) sends to the host the joined text names, not the URL's.
		{"mcp__x__get", map[string]any{"base_url": "https://api.allowed.com", "endpoint": "@evil.test/"}, "base_url=https://api.allowed.com endpoint=@evil.test/", true},
		{"mcp__x__get", map[string]any{"url": "https://api.allowed.com", "suffix": ".evil.test"}, "url=https://api.allowed.com suffix=.evil.test", true},
		{"mcp__x__get", map[string]any{"url": "https://api.allowed.com:8443", "opts": map[string]any{"tail": []any{":@evil.test"}}}, "url=https://api.allowed.com:8443 opts.tail[0]=:@evil.test", true},
		{"mcp__x__get", map[string]any{"target": "https://api.allowed.com", "suffix": "	.evil.test"}, "target=https://api.allowed.com suffix=	.evil.test", true},
		{"mcp__x__get", map[string]any{"url": "https://api.allowed.com/v1", "base": "https://api.allowed.com", "suffix": ".evil.test"}, "url=https://api.allowed.com/v1 suffix=.evil.test", true},
		// Controls: a path, query or fragment after the host; no other text; text that
		// starts a path, query or fragment itself; numbers and empty strings.
		{"mcp__x__get", map[string]any{"url": "https://api.allowed.com/v1/x", "body": "hello"}, "api.allowed.com", false},
		{"mcp__x__get", map[string]any{"url": "https://api.allowed.com?q=1", "body": "hello"}, "api.allowed.com", false},
		{"mcp__x__get", map[string]any{"url": "https://api.allowed.com"}, "api.allowed.com", false},
		{"mcp__x__get", map[string]any{"url": "https://api.allowed.com", "n": 5, "dry": true, "note": ""}, "api.allowed.com", false},
		{"mcp__x__get", map[string]any{"base_url": "https://api.allowed.com", "endpoint": "/v1/x", "query": "?a=1", "frag": "#top"}, "api.allowed.com", false},
		{"mcp__x__get", map[string]any{"url": "https://api.allowed.com/v1", "base": "https://api.allowed.com"}, "api.allowed.com", false},
		// A path a server could resolve as a URL with a host of its own.
		{"mcp__fs__read", map[string]any{"path": "https://evil.test/x.json"}, "https://evil.test/x.json", true},
		{"mcp__fs__read", map[string]any{"path": "https:evil.test/x.json"}, "https:evil.test/x.json", true},
		{"mcp__fs__read", map[string]any{"path": "//evil.test/x"}, "//evil.test/x", true},
		{"mcp__fs__read", map[string]any{"path": " //evil.test/x"}, " //evil.test/x", true},
		{"mcp__fs__read", map[string]any{"path": "/\\evil.test/x"}, "/\\evil.test/x", true},
		{"mcp__fs__read", map[string]any{"path": "notes\\x.md"}, "notes\\x.md", true},
		{"mcp__fs__read", map[string]any{"path": "/tmp/x.json"}, "/tmp/x.json", false},
		{"mcp__fs__read", map[string]any{"path": "notes/a b.md"}, "notes/a b.md", false},
		{"mcp__fs__read", map[string]any{"path": "./a//b:c"}, "./a//b:c", false},
		// Arguments past the walk's bounds are not read whole: unclear, and never the clear
		// target's text (a session answer for it must not cover them).
		{"mcp__x__send", map[string]any{"path": "x", "deep": nested(maxURLWalkDepth + 1)}, "path=x (nest deeper than 64 levels)", true},
		{"mcp__x__send", map[string]any{"deep": nested(maxURLWalkDepth + 1)}, "(nest deeper than 64 levels)", true},
		{"mcp__x__send", map[string]any{"path": "x", "deep": nested(maxURLWalkDepth - 2)}, "x", false},
		{"mcp__x__send", map[string]any{"path": "x", "many": make([]any, maxURLWalkValues)}, "path=x (hold more than 65536 values)", true},
	} {
		got, why := Target(tc.tool, tc.args)
		if got != tc.want || (why != "") != tc.unclear {
			t.Errorf("Target(%s, %q) = %q, unclear %q; want %q, unclear %v", tc.tool, tc.args, got, why, tc.want, tc.unclear)
		}
	}
}

// nested is depth arrays, one inside the other.
func nested(depth int) any {
	var v any = "x"
	for i := 0; i < depth; i++ {
		v = []any{v}
	}
	return v
}

// TestURLShaped: a value a client would take whole for a URL, and text that only contains
// one.
func TestURLShaped(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"https://evil.test/", true},
		{"HTTPS://evil.test", true},
		{"  https://evil.test/\n", true},
		{"\x00https://evil.test/", true},
		{"ht\ttps://evil.test/", true},
		{"https:/\n/evil.test/", true},
		{"https:evil.test", true},
		{"wss://evil.test/s", true},
		{"git+ssh://evil.test/r", true},
		{"s3://bucket/key", true},
		{"file:///etc/passwd", true},
		{"https://evil.test/ x", true},
		{"https:// evil.test", false},
		{"https://", false},
		{"h\nttps://evil.test/", true},
		{"https:/\t/evil.test/", true},
		{"HTTP:evil.test", true},
		{"wss:evil.test", true},
		{"file:x", true},
		{"https:\\\\evil.test", true},
		{"https:\n", false},
		{"javascript:alert(1)", false},
		{"mcp-server:evil.test", false},
		{"ht tps://evil.test/", false},
		{"1http://evil.test/", false},
		{"+x://evil.test/", false},
		{"see https://evil.test/", false},
		{"<https://evil.test/>", false},
		{"mailto:me@evil.test", false},
		{"urn:isbn:0451450523", false},
		{"12:30", false},
		{"C:\\x", false},
		{"//evil.test/x", false},
		{"evil.test/x", false},
		{"http: not a url", false},
		{"", false},
	} {
		if got := urlShaped(tc.s); got != tc.want {
			t.Errorf("urlShaped(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// TestGivenTarget: `lev policy test --target` is read as the live gate reads the same
// call's argument, so the dry run and the run match the same text (and agree on what is
// unclear).
func TestGivenTarget(t *testing.T) {
	for _, tc := range []struct {
		tool, given, want string
		unclear           bool
	}{
		{"http_post", "API.Example.com:8443", "api.example.com", false},
		{"http_post", "https://API.example.com/x", "api.example.com", false},
		{"http_post", "evil.test\\@x.example.com", "evil.test\\@x.example.com", true},
		{"mcp__web__fetch", "https://evil.test/\t.example.com", "https://evil.test/\t.example.com", true},
		{"mcp__web__fetch", "docs.example.com", "docs.example.com", false},
		{"mcp__web__fetch", "https:evil.test", "https:evil.test", true},
		{"mcp__web__fetch", "https://Hooks.Example.com/a", "hooks.example.com", false},
		{"mcp__fs__write_text_file", "notes/a b.md", "notes/a b.md", false},
		{"shell", "curl https://e.test", "curl https://e.test", false},
	} {
		got, why := GivenTarget(tc.tool, tc.given)
		if got != tc.want || (why != "") != tc.unclear {
			t.Errorf("GivenTarget(%s, %q) = %q, unclear %q; want %q, unclear %v", tc.tool, tc.given, got, why, tc.want, tc.unclear)
		}
	}
}

type fixedPolicy PolicyDecision

func (p fixedPolicy) Decide(Request) PolicyDecision { return PolicyDecision(p) }

func TestGateDecisions(t *testing.T) {
	ask := fixedPolicy{Verdict: VerdictAsk, Reason: "default ask"}
	allow := fixedPolicy{Verdict: VerdictAllow, Rule: "allow[0]", Reason: "rule"}
	deny := fixedPolicy{Verdict: VerdictDeny, Rule: "rule[0]", Reason: "rule"}
	answer := func(a Answer) Asker {
		return AskFunc(func(context.Context, Prompt) (Answer, error) { return a, nil })
	}
	for _, tc := range []struct {
		name    string
		tool    string
		taint   Level
		pol     Policy
		mode    Mode
		asker   Asker
		allowed bool
		sources []Source
	}{
		{"not outbound", "read_file", Private, deny, Headless, nil, true, nil},
		{"within clearance", "http_post", Internal, deny, Headless, nil, true, []Source{SourceWithinClearance}},
		{"policy allow", "http_post", Private, allow, Headless, nil, true, []Source{SourcePolicyAllow}},
		{"policy deny", "http_post", Private, deny, Interactive, answer(AnswerOnce), false, []Source{SourcePolicyDeny}},
		{"policy deny under yolo stays", "http_post", Private, deny, Yolo, nil, false, []Source{SourcePolicyDeny}},
		{"ask headless", "shell", Private, ask, Headless, nil, false, []Source{SourceAutoBlock}},
		{"ask interactive without asker", "shell", Private, ask, Interactive, nil, false, []Source{SourceAutoBlock}},
		{"ask once", "shell", Private, ask, Interactive, answer(AnswerOnce), true, []Source{SourceUserOnce}},
		{"ask deny", "shell", Private, ask, Interactive, answer(AnswerDeny), false, []Source{SourceUserDeny}},
		{"ask fails", "shell", Private, ask, Interactive, AskFunc(func(context.Context, Prompt) (Answer, error) { return 0, errors.New("closed") }), false, []Source{SourceAskFailed}},
		{"yolo", "submit_output", Private, ask, Yolo, nil, true, []Source{SourceAutoBlock, SourceYoloAutoApprove}},
		{"unknown tool public data passes", "mcp__x", Public, ask, Headless, nil, true, []Source{SourceWithinClearance}},
		{"unknown tool internal data gated", "mcp__x", Internal, ask, Headless, nil, false, []Source{SourceAutoBlock}},
		{"nil policy asks", "shell", Private, nil, Headless, nil, false, []Source{SourceAutoBlock}},
		{"unrecognised verdict fails closed", "shell", Private, fixedPolicy{Verdict: "maybe"}, Yolo, nil, false, []Source{SourcePolicyDeny}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := &MemAudit{}
			g := &Gate{Table: NewTable(nil), Policy: tc.pol, Mode: tc.mode, Asker: tc.asker, Audit: mem}
			out, err := g.Check(context.Background(), Call{Tool: tc.tool, Target: "t", Taint: tc.taint, Stage: 2})
			if err != nil {
				t.Fatal(err)
			}
			if out.Allowed != tc.allowed {
				t.Fatalf("allowed = %v (%s)", out.Allowed, out.Reason)
			}
			if len(mem.Records) != len(tc.sources) {
				t.Fatalf("records %+v, want sources %v", mem.Records, tc.sources)
			}
			for i, r := range mem.Records {
				if r.DecisionSource != tc.sources[i] || r.Tool != tc.tool || r.Taint != tc.taint || r.Stage != 2 || r.Seq != i+1 {
					t.Errorf("record %d = %+v", i, r)
				}
			}
			if len(tc.sources) == 2 { // yolo pair
				blk, ok := mem.Records[0], mem.Records[1]
				if blk.Decision != "block" || !blk.Waived || ok.Decision != "allow" || ok.Overrides != blk.Seq {
					t.Errorf("yolo pair not linked: %+v / %+v", blk, ok)
				}
			}
		})
	}
}

func TestGateSessionAnswer(t *testing.T) {
	asked := 0
	g := &Gate{Table: NewTable(nil), Mode: Interactive, Audit: &MemAudit{},
		Asker: AskFunc(func(context.Context, Prompt) (Answer, error) { asked++; return AnswerSession, nil })}
	call := Call{Tool: "http_post", Target: "api.example.com", Taint: Private}
	for i := 0; i < 3; i++ {
		out, err := g.Check(context.Background(), call)
		if err != nil || !out.Allowed {
			t.Fatalf("call %d: %+v %v", i, out, err)
		}
		want := SourceSessionAllow
		if i == 0 {
			want = SourceUserSession
		}
		if out.Source != want {
			t.Fatalf("call %d source %s", i, out.Source)
		}
	}
	if asked != 1 {
		t.Fatalf("asked %d times", asked)
	}
	// The session answer covers that tool and target only.
	g.Asker = AskFunc(func(context.Context, Prompt) (Answer, error) { return AnswerDeny, nil })
	out, _ := g.Check(context.Background(), Call{Tool: "http_post", Target: "other.test", Taint: Private})
	if out.Allowed {
		t.Fatal("session answer leaked to another target")
	}
}

func TestFileAudit(t *testing.T) {
	dir := t.TempDir()
	a := NewFileAudit(dir)
	g := &Gate{Table: NewTable(nil), Mode: Yolo, Audit: a}
	if _, err := g.Check(context.Background(), Call{Tool: "shell", Target: "curl", Taint: Private, Stage: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Check(context.Background(), Call{Tool: "http_post", Target: "h", Taint: Public, Stage: 2}); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadAudit(AuditPath(dir, 1))
	if err != nil || len(recs) != 2 || recs[0].DecisionSource != SourceAutoBlock || recs[1].DecisionSource != SourceYoloAutoApprove {
		t.Fatalf("stage 1: %+v %v", recs, err)
	}
	b, _ := os.ReadFile(AuditPath(dir, 1))
	for _, want := range []string{`"decision_source": "YoloAutoApprove"`, `"decision_source": "AutoBlock"`, `"taint": "private"`, `"clearance": "internal"`} {
		if !contains(string(b), want) {
			t.Errorf("audit file lacks %s:\n%s", want, b)
		}
	}
	// A second writer (a resumed run) appends.
	a2 := NewFileAudit(dir)
	g2 := &Gate{Table: NewTable(nil), Mode: Headless, Audit: a2}
	g2.Check(context.Background(), Call{Tool: "shell", Taint: Private, Stage: 1})
	recs, _ = ReadAudit(AuditPath(dir, 1))
	if len(recs) != 3 {
		t.Fatalf("resumed audit has %d records", len(recs))
	}
	// An audit that cannot be written blocks the call.
	bad := filepath.Join(dir, "file")
	os.WriteFile(bad, nil, 0o600)
	g3 := &Gate{Table: NewTable(nil), Mode: Yolo, Audit: NewFileAudit(bad)}
	out, err := g3.Check(context.Background(), Call{Tool: "shell", Taint: Private, Stage: 1})
	if err == nil || out.Allowed {
		t.Fatalf("unwritable audit let the call through: %+v %v", out, err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
