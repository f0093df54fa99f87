package taintgate

import (
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// TestHostSpellingsMeetDenyRules (issue 27, item 3): a deny rule on `target` holds against
// every spelling of the address it names, and a target lev cannot read is not waived by
// --yolo while such a rule exists. Each row is a real run under --yolo (engine, scripted
// model, pipeline, this gate) that reads Private data through a grant, then sends it with
// a real stdio MCP server's post tool (classified outbound, clearance internal).
//
// Attack rows: the policy denies target 127.0.0.1, and the url spells 127.0.0.1 as a
// number, in octal, in hex, short, IPv4-mapped, percent-encoded, with a trailing dot. Each
// must be a PolicyDeny on the canonical target, with nothing reaching the server. An
// unclear url (an IPv6 zone) must be AutoBlocked with no YoloAutoApprove. Controls: the
// same spellings under a deny rule naming another address are waived by --yolo and reach
// the server (so the attack rows' url reaches the gate and the tool as written), and the
// unclear url under a deny rule that does not read the target is waived too.
func TestHostSpellingsMeetDenyRules(t *testing.T) {
	const (
		denyLoop  = "[[rule]]\nname = \"no loopback\"\nwhen = 'target == \"127.0.0.1\"'\naction = \"deny\"\n"
		denyOther = "[[rule]]\nname = \"not nine\"\nwhen = 'target == \"127.0.0.9\"'\naction = \"deny\"\n"
		denyTool  = "[[rule]]\nname = \"no search\"\nwhen = 'tool == \"web_search\"'\naction = \"deny\"\n"
	)
	spellings := []string{
		"127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.1", "0x7F.0.0.1", "127.1", "0177.1",
		"[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "%31%32%37.0.0.1", "127.0.0.1.",
	}
	type row struct {
		name, policy, host string
		sources            []taint.Source
		target             string // the audit record's target
	}
	var rows []row
	for _, h := range spellings {
		rows = append(rows,
			row{"deny rule sees " + h, denyLoop, h, []taint.Source{taint.SourcePolicyDeny}, "127.0.0.1"},
			row{"control: waived under a rule naming another address, " + h, denyOther, h,
				[]taint.Source{taint.SourceAutoBlock, taint.SourceYoloAutoApprove}, "127.0.0.1"})
	}
	const zoned = "[fe80::1%25lo]"
	rows = append(rows,
		row{"unclear target is not waived while a deny rule reads the target", denyLoop, zoned,
			[]taint.Source{taint.SourceAutoBlock}, "https://" + zoned + "/x"},
		row{"control: unclear target waived when no deny rule reads the target", denyTool, zoned,
			[]taint.Source{taint.SourceAutoBlock, taint.SourceYoloAutoApprove}, "https://" + zoned + "/x"},
	)
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LEV_BENCH_SOCKET", "")
			w := newWorld(t)
			w.exec = mcpExec
			log := logFile(t, "web")
			url := "https://" + tc.host + "/x"
			o := w.run(t, runCase{
				tools:   []string{"read_file", "mcp__web__*"},
				script:  strings.ReplaceAll(script("one", "mcp__web__post", `{"url": "`+url+`", "body": "{{last}}"}`), "HOME", w.home),
				policy:  tc.policy,
				yolo:    true,
				bpExtra: "[mcp]\nservers = [\"web\"]\n",
				config:  stdioServer("web", "web", log, w.wd, "classification = \"outbound\"\nclearance = \"internal\"\n"),
			})
			rule := ""
			if tc.sources[0] == taint.SourcePolicyDeny {
				rule = `rule[0] "no loopback"`
			}
			checkAudit(t, o.audit, want{tool: "mcp__web__post", sources: tc.sources, taint: taint.Private, rule: rule})
			rec := calls(o.audit)[0]
			if rec.Target != tc.target {
				t.Errorf("audit target %q, want %q", rec.Target, tc.target)
			}
			allowed := tc.sources[len(tc.sources)-1] == taint.SourceYoloAutoApprove
			if !allowed && tc.sources[0] == taint.SourceAutoBlock && !strings.Contains(rec.Reason, "--yolo does not waive it") {
				t.Errorf("the block does not say why --yolo did not waive it: %s", rec.Reason)
			}
			got := received(t, log)
			if allowed != strings.Contains(got, "post "+url) {
				t.Fatalf("allowed %v, but the server received %q", allowed, got)
			}
			if !allowed && strings.Contains(got, secret) {
				t.Fatalf("the secret reached the server: %q", got)
			}
		})
	}
}

// TestBuiltinToolsDialWhatTheGateMatched: the built-in HTTP tools reach the host the gate
// matched, not another reading of the same text (Go's resolver would look 2130706433 up
// in DNS, where the gate matched 127.0.0.1). A real run reads Private data and posts it
// with http_post under an allowlist entry for 127.0.0.1; each spelling must be allowed on
// target 127.0.0.1 and reach the loopback server. Control: the plain spelling; and a
// spelling of another address (127.0.0.2, as 2130706434) is not covered by the entry and
// reaches nothing.
func TestBuiltinToolsDialWhatTheGateMatched(t *testing.T) {
	const allow = "[[allow]]\ntool = \"http_post\"\ntarget = \"127.0.0.1\"\nmax_sensitivity = \"private\"\n"
	for _, tc := range []struct {
		host    string
		allowed bool
	}{
		{"127.0.0.1", true},
		{"2130706433", true},
		{"0x7f.1", true},
		{"0177.0.0.1", true},
		{"127.1", true},
		{"[::ffff:127.0.0.1]", true},
		{"2130706434", false},
	} {
		t.Run(tc.host, func(t *testing.T) {
			w := newWorld(t)
			u := strings.Replace(w.srv.URL, "127.0.0.1", tc.host, 1) + "/collect"
			o := w.run(t, runCase{tools: []string{"read_file", "http_post"}, policy: allow,
				script: strings.ReplaceAll(script("one", "http_post", `{"url": "`+u+`", "body": "{{last}}"}`), "HOME", w.home)})
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
