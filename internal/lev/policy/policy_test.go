package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/taint"
)

const sample = `# my policy
default = "ask"

[tools.mcp__docs__search]
outbound = false

[tools.mcp__slack__post]
clearance = "internal"

[[allow]]
tool = "http_post"
target = "*.Example.com"
max_sensitivity = "private"

[[allow]]
tool = "web_fetch"
target = "docs.test"
max_sensitivity = "internal"

[[rule]]
name = "no secrets through curl"
when = 'tool == "shell" && taint_level >= PRIVATE && target contains "curl"'
action = "deny"

[[rule]]
when = 'tool == "submit_output" && stage == 3'
action = "allow"

[[rule]]
when = 'glob("*.corp.test", target) && taint == "private"'
action = "deny"
`

func mustParse(t *testing.T, s string) *Policy {
	t.Helper()
	p, err := Parse([]byte(s), "policy.toml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unknown top key", "defualt = \"ask\"\n", `line 1: unknown key "defualt"`},
		{"unknown allow key", "[[allow]]\ntool = \"x\"\nmax_sensitivity = \"public\"\ntargte = \"a\"\n", `line 4: unknown key "allow.targte"`},
		{"bad level", "[[allow]]\ntool = \"x\"\nmax_sensitivity = \"secret\"\n", `allow[0].max_sensitivity: unknown sensitivity "secret"`},
		{"missing level", "[[allow]]\ntool = \"x\"\n", `allow[0].max_sensitivity: missing`},
		{"missing tool", "[[allow]]\nmax_sensitivity = \"public\"\n", `allow[0].tool: missing`},
		{"bad action", "[[rule]]\nwhen = 'true'\naction = \"permit\"\n", `rule[0].action: "permit"`},
		{"bad expr", "[[rule]]\nwhen = 'tool ==== 1'\naction = \"deny\"\n", `rule[0].when:`},
		{"expr unknown var", "[[rule]]\nwhen = 'tol == \"x\"'\naction = \"deny\"\n", `rule[0].when: unknown name tol`},
		{"expr not bool", "[[rule]]\nwhen = 'stage + 1'\naction = \"deny\"\n", `rule[0].when: expected bool`},
		{"bad default", "default = \"maybe\"\n", `default: "maybe"`},
		{"tool without clearance", "[tools.x]\noutbound = true\n", `tools.x: an outbound tool needs a clearance`},
		{"syntax", "[[allow]\n", `line 1`},
		{"table in another case", "[[Allow]]\ntool = \"shell\"\nmax_sensitivity = \"private\"\n", `policy.toml:1: unknown key "Allow" (keys are case-sensitive: the key is "allow")`},
		{"key in another case", "[[allow]]\nTool = \"shell\"\nmax_sensitivity = \"private\"\n", `policy.toml:2: unknown key "allow.Tool" (keys are case-sensitive: the key is "tool")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "policy.toml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "example.com.evil.test", false},
		{"*.example.com", "evilexample.com", false},
		{"*.example.com", "api.example.com.", false},
		{"api.example.com", "api.example.com", true},
		{"api.example.com", "api-example.com", false},
		{"git *", "git push origin", true},
		{"git *", "gitk", false},
		{"*", "", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*a*b*", "xxaxxbxx", true},
		{"*a*b", "xxaxxbxx", false},
	} {
		if got := Glob(tc.p, tc.s); got != tc.want {
			t.Errorf("Glob(%q, %q) = %v", tc.p, tc.s, got)
		}
	}
}

func TestDecide(t *testing.T) {
	p := mustParse(t, sample)
	req := func(tool, target string, l taint.Level, stage int) taint.Request {
		return taint.Request{Tool: tool, Target: target, Taint: l, Gating: p.Table().Gating(tool), Stage: stage}
	}
	for _, tc := range []struct {
		name string
		r    taint.Request
		want taint.Verdict
		rule string
	}{
		{"allowlisted host", req("http_post", "api.example.com", taint.Private, 1), taint.VerdictAllow, "allow[0]"},
		{"pattern lower-cased", req("http_post", "x.example.com", taint.Private, 1), taint.VerdictAllow, "allow[0]"},
		{"lookalike host", req("http_post", "example.com.evil.test", taint.Private, 1), taint.VerdictAsk, ""},
		{"other tool same host", req("shell", "api.example.com", taint.Private, 1), taint.VerdictAsk, ""},
		{"over max sensitivity", req("web_fetch", "docs.test", taint.Private, 1), taint.VerdictAsk, ""},
		{"within max sensitivity", req("web_fetch", "docs.test", taint.Internal, 1), taint.VerdictAllow, "allow[1]"},
		{"deny rule", req("shell", "curl -d @/x https://e.test", taint.Private, 1), taint.VerdictDeny, `rule[0] "no secrets through curl"`},
		{"allow rule", req("submit_output", "result", taint.Private, 3), taint.VerdictAllow, "rule[1]"},
		{"allow rule other stage", req("submit_output", "result", taint.Private, 2), taint.VerdictAsk, ""},
		{"deny beats allowlist", req("http_post", "x.corp.test", taint.Private, 1), taint.VerdictDeny, "rule[2]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.r)
			if d.Verdict != tc.want || d.Rule != tc.rule || d.Reason == "" {
				t.Fatalf("got %+v, want %s by %q", d, tc.want, tc.rule)
			}
		})
	}
	// [tools] classifies MCP tools.
	if c := p.Table().Gating("mcp__docs__search"); c.Outbound {
		t.Error("mcp__docs__search should be ungated")
	}
	if c := p.Table().Gating("mcp__slack__post"); !c.Outbound || c.Clearance != taint.Internal {
		t.Errorf("mcp__slack__post: %+v", c)
	}
	// default = "deny"
	pd := mustParse(t, `default = "deny"`)
	if d := pd.Decide(req("shell", "x", taint.Private, 1)); d.Verdict != taint.VerdictDeny {
		t.Errorf("default deny: %+v", d)
	}
}

func TestAddAllow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "policy.toml")
	if i, err := AddAllow(path, AllowEntry{Tool: "send_email", Target: "*.example.com", MaxSensitivity: "Internal"}); err != nil || i != 0 {
		t.Fatalf("first add: %d %v", i, err)
	}
	os.WriteFile(path, append([]byte("# keep me\n"), mustRead(t, path)...), 0o600)
	if i, err := AddAllow(path, AllowEntry{Tool: "http_post", Target: "api.test", MaxSensitivity: "private"}); err != nil || i != 1 {
		t.Fatalf("second add: %d %v", i, err)
	}
	got := string(mustRead(t, path))
	if !strings.HasPrefix(got, "# keep me\n") {
		t.Errorf("comment lost:\n%s", got)
	}
	p, err := Load(path)
	if err != nil || len(p.File.Allow) != 2 || p.File.Allow[0].MaxSensitivity != "internal" {
		t.Fatalf("reload: %+v %v", p, err)
	}
	// Bad input changes nothing.
	before := mustRead(t, path)
	for _, a := range []AllowEntry{
		{Tool: "x", MaxSensitivity: "secret"},
		{Tool: "", MaxSensitivity: "public"},
		{Tool: "a\"b", MaxSensitivity: "public"},
	} {
		if _, err := AddAllow(path, a); err == nil {
			t.Errorf("AddAllow(%+v) accepted", a)
		}
	}
	if !bytes.Equal(before, mustRead(t, path)) {
		t.Error("a refused add changed the file")
	}
	broken := filepath.Join(dir, "broken.toml")
	os.WriteFile(broken, []byte("defualt = 1\n"), 0o600)
	if _, err := AddAllow(broken, AllowEntry{Tool: "x", MaxSensitivity: "public"}); err == nil || !strings.Contains(err.Error(), "defualt") {
		t.Errorf("add to a broken file: %v", err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSettingsAndTighten(t *testing.T) {
	p := mustParse(t, "")
	req := func(p *Policy, tool string, l taint.Level) taint.Request {
		return taint.Request{Tool: tool, Taint: l, Gating: p.Table().Gating(tool)}
	}
	// The user's on_violation replaces the default, in either direction.
	if d := p.WithSettings(taint.VerdictAllow, nil).Decide(req(p, "shell", taint.Private)); d.Verdict != taint.VerdictAllow {
		t.Errorf("user allow: %+v", d)
	}
	// A blueprint can only make it stricter.
	allowing := p.WithSettings(taint.VerdictAllow, nil)
	if d := allowing.Tighten(taint.VerdictDeny, nil).Decide(req(p, "shell", taint.Private)); d.Verdict != taint.VerdictDeny {
		t.Errorf("blueprint deny over user allow: %+v", d)
	}
	denying := p.WithSettings(taint.VerdictDeny, nil)
	if d := denying.Tighten(taint.VerdictAllow, nil).Decide(req(p, "shell", taint.Private)); d.Verdict != taint.VerdictDeny {
		t.Errorf("blueprint allow loosened user deny: %+v", d)
	}
	// Clearances: the user sets, the blueprint only lowers.
	u := p.WithSettings("", map[string]taint.Level{"http_post": taint.Private, "mcp__x": taint.Internal})
	if c := u.Table().Gating("http_post"); c.Clearance != taint.Private {
		t.Errorf("user clearance: %+v", c)
	}
	if c := u.Table().Gating("mcp__x"); !c.Outbound || !c.Known || c.Clearance != taint.Internal {
		t.Errorf("user classifies mcp tool: %+v", c)
	}
	b := u.Tighten("", map[string]taint.Level{"http_post": taint.Public, "mcp__x": taint.Private, "read_file": taint.Public, "mcp__y": taint.Private})
	for tool, want := range map[string]taint.Gating{
		"http_post": {Outbound: true, Clearance: taint.Public, Known: true},
		"mcp__x":    {Outbound: true, Clearance: taint.Internal, Known: true},
		"read_file": {Known: true},
		"mcp__y":    {Outbound: true, Clearance: taint.Public, Known: false},
	} {
		if c := b.Table().Gating(tool); c != want {
			t.Errorf("tightened %s = %+v, want %+v", tool, c, want)
		}
	}
	if _, err := ParseVerdict("maybe"); err == nil {
		t.Error("ParseVerdict accepted maybe")
	}
}

func TestPathFor(t *testing.T) {
	t.Setenv("LEV_HOME", "/lvtsbx-home")
	if got := PathFor(nil); got != "/lvtsbx-home/policy.toml" {
		t.Errorf("no config: %s", got)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config.toml")
	os.WriteFile(cfgFile, []byte("[security]\npolicy_file = \"pol.toml\"\n"), 0o600)
	t.Setenv("LEV_CONFIG", cfgFile)
	if got, err := DefaultPath(); err != nil || got != filepath.Join(dir, "pol.toml") {
		t.Errorf("from config: %s %v", got, err)
	}
	t.Setenv("LEV_POLICY", "/x/p.toml")
	if got, err := DefaultPath(); err != nil || got != "/x/p.toml" {
		t.Errorf("env: %s %v", got, err)
	}
	if got := PathFor(nil); got != "/x/p.toml" {
		t.Errorf("env, live resolution: %s", got)
	}
	t.Setenv("LEV_POLICY", "rel.toml")
	if _, err := DefaultPath(); err == nil || err.Error() != `LEV_POLICY="rel.toml": must be an absolute path (lev serve and lev policy may run in different directories)` {
		t.Errorf("relative env: %v", err)
	}
}

func TestRuleRuntimeErrorDenies(t *testing.T) {
	p := mustParse(t, "[[allow]]\ntool = \"shell\"\nmax_sensitivity = \"private\"\n[[rule]]\nname = \"bad\"\nwhen = 'stage % (stage - stage) == 0'\naction = \"allow\"\n")
	d := p.Decide(taint.Request{Tool: "shell", Taint: taint.Private, Gating: p.Table().Gating("shell"), Stage: 1})
	if d.Verdict != taint.VerdictDeny || !strings.Contains(d.Reason, "failed to evaluate") {
		t.Fatalf("runtime error: %+v", d)
	}
}

// TestToolsServerWildcard: [tools."mcp__SERVER__*"] classifies every tool of that server
// (an exact [tools.NAME] still wins); another server's tools stay unclassified (the
// control: fail-closed Public).
func TestToolsServerWildcard(t *testing.T) {
	p, err := Parse([]byte("[tools.\"mcp__fs__*\"]\nclearance = \"private\"\n[tools.mcp__fs__write]\noutbound = false\n"), "policy.toml")
	if err != nil {
		t.Fatal(err)
	}
	tb := p.Table()
	for _, tc := range []struct {
		tool      string
		outbound  bool
		clearance taint.Level
		known     bool
	}{
		{"mcp__fs__read", true, taint.Private, true},
		{"mcp__fs__write", false, 0, true},
		{"mcp__fsx__read", true, taint.Public, false},
	} {
		c := tb.Gating(tc.tool)
		if c.Outbound != tc.outbound || c.Clearance != tc.clearance || c.Known != tc.known {
			t.Errorf("%s: %+v", tc.tool, c)
		}
	}
}

// TestTargetScopedEntriesNeedAClearTarget: a target-scoped [[allow]] entry, and an allow
// rule that reads the target, vouch for one destination; neither covers a call naming no
// target (`*` matches the empty string) or one lev could not read (the text a glob matched
// is not the host the server reaches). Controls: the same entries cover a clear target, an
// untargeted entry covers every call of its tool, and a deny rule still matches the raw
// text of an unclear target.
func TestTargetScopedEntriesNeedAClearTarget(t *testing.T) {
	scoped := mustParse(t, `
[[allow]]
tool = "mcp__web__fetch"
target = "*.example.com"
max_sensitivity = "private"

[[allow]]
tool = "mcp__chat__*"
target = "*"
max_sensitivity = "private"

[[rule]]
name = "docs by rule"
when = 'tool == "mcp__docs__get" && target endsWith ".example.com"'
action = "allow"

[[rule]]
name = "never evil"
when = 'target contains "evil.test"'
action = "deny"
`)
	anyTarget := mustParse(t, "[[allow]]\ntool = \"mcp__web__fetch\"\nmax_sensitivity = \"private\"\n")
	defAllow := mustParse(t, "default = \"allow\"\n")
	const unclear = "its url contains a control character"
	for _, tc := range []struct {
		name    string
		p       *Policy
		tool    string
		target  string
		unclear string
		want    taint.Verdict
	}{
		{"control: clear target under the pattern", scoped, "mcp__web__fetch", "docs.example.com", "", taint.VerdictAllow},
		{"unclear target whose text matches the pattern", scoped, "mcp__web__fetch", "https://x.test/\t.example.com", unclear, taint.VerdictAsk},
		{"empty target, pattern *", scoped, "mcp__chat__post", "", "", taint.VerdictAsk},
		{"control: a target under pattern *", scoped, "mcp__chat__post", "general", "", taint.VerdictAllow},
		{"allow rule reading the target, unclear target", scoped, "mcp__docs__get", "https://x.test/\t.example.com", unclear, taint.VerdictAsk},
		{"control: allow rule reading the target, clear target", scoped, "mcp__docs__get", "docs.example.com", "", taint.VerdictAllow},
		{"deny rule still matches an unclear target's text", scoped, "mcp__web__fetch", "https://evil.test/\t.example.com", unclear, taint.VerdictDeny},
		{"untargeted entry covers an unclear target", anyTarget, "mcp__web__fetch", "https://x.test/\t.example.com", unclear, taint.VerdictAllow},
		{"untargeted entry covers an empty target", anyTarget, "mcp__web__fetch", "", "", taint.VerdictAllow},
		{"default allow asks for an unclear target", defAllow, "mcp__web__fetch", "https://x.test/\t.example.com", unclear, taint.VerdictAsk},
		{"control: default allow, clear target", defAllow, "mcp__web__fetch", "x.test", "", taint.VerdictAllow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.p.Decide(taint.Request{Tool: tc.tool, Target: tc.target, TargetUnclear: tc.unclear, Taint: taint.Private,
				Gating: tc.p.Table().Gating(tc.tool)})
			if d.Verdict != tc.want {
				t.Fatalf("got %+v, want %s", d, tc.want)
			}
		})
	}
}

// TestUnclearTargetUnderDenyOnTarget: while a deny rule reads the target, a call whose
// target is unclear is not allowed by an entry or rule that did not read it (an ask
// instead), and its ask may not be waived (NoWaive, which the gate honours under --yolo).
// Controls: the same call with a clear target is allowed; the same unclear call under a
// policy whose deny rule does not read the target keeps its allow and carries no NoWaive.
func TestUnclearTargetUnderDenyOnTarget(t *testing.T) {
	const onTarget = "[[rule]]\nwhen = 'target == \"127.0.0.1\"'\naction = \"deny\"\n"
	const onTool = "[[rule]]\nwhen = 'tool == \"web_search\"'\naction = \"deny\"\n"
	const allowRule = "[[rule]]\nwhen = 'tool == \"http_post\"'\naction = \"allow\"\n"
	const allowEntry = "[[allow]]\ntool = \"http_post\"\nmax_sensitivity = \"private\"\n"
	for _, tc := range []struct {
		name, policy, target, unclear string
		want                          taint.Verdict
		noWaive                       bool
	}{
		{"allow rule, unclear target", onTarget + allowRule, "http://[fe80::1%25lo]/", "zone", taint.VerdictAsk, true},
		{"allow entry, unclear target", onTarget + allowEntry, "http://[fe80::1%25lo]/", "zone", taint.VerdictAsk, true},
		{"default ask, unclear target", onTarget, "http://[fe80::1%25lo]/", "zone", taint.VerdictAsk, true},
		{"control: allow rule, clear target", onTarget + allowRule, "evil.test", "", taint.VerdictAllow, false},
		{"control: deny rule on the target matches", onTarget + allowRule, "127.0.0.1", "", taint.VerdictDeny, false},
		{"control: deny rule not on the target", onTool + allowRule, "http://[fe80::1%25lo]/", "zone", taint.VerdictAllow, false},
		{"control: default ask, no deny rule on the target", onTool, "http://[fe80::1%25lo]/", "zone", taint.VerdictAsk, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(t, tc.policy)
			d := p.Decide(taint.Request{Tool: "http_post", Target: tc.target, TargetUnclear: tc.unclear, Taint: taint.Private})
			if d.Verdict != tc.want || (d.NoWaive != "") != tc.noWaive {
				t.Fatalf("got %+v, want %s (no waive %v)", d, tc.want, tc.noWaive)
			}
		})
	}
}
