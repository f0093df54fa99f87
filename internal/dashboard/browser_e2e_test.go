//go:build e2e

package dashboard

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/testutil/browser"
)

// -update-screenshots rewrites docs/dashboard/*.png from TestBrowserPages (make screenshots).
var updateScreenshots = flag.Bool("update-screenshots", false, "write docs/dashboard/*.png from the browser test")

// demo is a jail with a run in each state the pages show.
func demo(t *testing.T) *runFiles {
	src := newRunFiles(t)
	t0 := time.Now().UTC().Add(-30 * time.Minute)
	src.jail = Jail{Instance: "proj-7f3a", Backend: "lima", Guest: []string{"reachable", "provisioned, run user lever", "podman service up"},
		Posture: "closed: deny by default; allowed: api.example.com:443 via the broker", Verified: false,
		Differences: []string{"LEVER_EGRESS (v4): rule 3 missing: -A LEVER_EGRESS -d 10.0.0.0/8 -j REJECT"},
		Desired:     []string{"-N LEVER_EGRESS", "-A LEVER_EGRESS -o lo -j ACCEPT", "-A LEVER_EGRESS -d 10.0.0.0/8 -j REJECT", "-A LEVER_EGRESS -j DROP"},
		Live:        []string{"-N LEVER_EGRESS", "-A LEVER_EGRESS -o lo -j ACCEPT", "-A LEVER_EGRESS -j ACCEPT", "-A LEVER_EGRESS -j DROP"},
		Acceptance:  "# lever acceptance: proj-7f3a\n\nPASS egress ruleset matches the desired one (v4, v6)\nPASS metadata address unreachable\nPASS broker certificate validates by IP\n"}
	src.broker = Broker{Running: true, Listen: "192.168.5.2:8443", CertNotAfter: t0.Add(89 * 24 * time.Hour),
		Clients: []Client{{Name: "manager", Serial: "4f1a", NotAfter: t0.Add(24 * time.Hour)}, {Name: "docs", Serial: "9c2e", NotAfter: t0.Add(24 * time.Hour)}}}
	for i := range 40 {
		who := "manager"
		if i%3 == 0 {
			who = "docs"
		}
		src.broker.Audit = append(src.broker.Audit, AuditLine{Time: t0.Add(time.Duration(i*i) * 10 * time.Second), Who: who, Route: "/llm/v1/messages", Status: 200, Outcome: "ok", Tokens: 800 + 37*i})
	}
	return src
}

// login opens the printed URL: the token is exchanged and leaves the address bar.
func login(t *testing.T, b *browser.Browser, s *served) {
	t.Helper()
	b.Do(t, chromedp.Navigate(s.srv.URL()), chromedp.WaitVisible(chromedp.CSS("nav")))
	if loc := browser.Eval[string](t, b, "location.href"); loc != "http://"+s.addr+"/" {
		t.Fatalf("after the token exchange the address is %q, want the token gone", loc)
	}
}

// TestBrowserPages: every page loads in Chromium with no console error, no exception and
// no CSP violation (with the make screenshots flag, each is saved to docs/dashboard).
func TestBrowserPages(t *testing.T) {
	src := demo(t)
	s := serve(t, src)
	src.start("manager", rid1, "coder")
	src.emit("manager", rid1, events.Event{Type: events.StageStart, Stage: "plan"})
	src.emit("manager", rid1, events.Event{Type: events.ToolCall, Call: "c1", Tool: "read_file", Args: json.RawMessage(`{"path":"src/main.go"}`), Decision: events.Allowed})
	src.emit("manager", rid1, events.Event{Type: events.ToolResult, Call: "c1", Tool: "read_file", Status: events.StatusOK, Bytes: 2048})
	src.emit("manager", rid1, events.Event{Type: events.Ask, Question: "q1", Tool: "web_fetch", Args: json.RawMessage(`{"url":"https://docs.example/api"}`), GatePrompt: true, Message: "taint gate: web_fetch to docs.example: data is private, above web_fetch's clearance (public)"})
	src.emit("manager", rid1, events.Event{Type: events.AnswerT, Question: "q1", Tool: "web_fetch", Answer: "deny", GatePrompt: true, Message: "answered"})
	src.emit("manager", rid1, events.Event{Type: events.Gate, Call: "c2", Tool: "web_fetch", Decision: events.Refused, Step: "gate", Source: "UserDeny", Taint: "private", Clearance: "public", Answer: "deny", Message: "data is private, above web_fetch's clearance (public); no policy rule matched; the default is ask; you denied it"})
	src.emit("manager", rid1, events.Event{Type: events.ToolCall, Call: "c2", Tool: "web_fetch", Args: json.RawMessage(`{"url":"https://docs.example/api"}`), Decision: events.Refused, Step: "gate", Source: `permission allow (blueprint coder)`, Taint: "private", Clearance: "public", Message: "refused by the taint gate"})
	src.start("docs", rid2, "writer")
	src.ask("docs", rid2, runner.Question{ID: "q1", Tool: "shell", Args: json.RawMessage(`{"command":"make docs"}`), Reason: "shell is ask in the writer blueprint"})
	b := browser.New(t)
	login(t, b, s)
	pages := []struct{ name, path, sel, want string }{
		{"jail", "/", "#verified", "drifted"},
		{"broker", "/broker", "#audit", "/llm/v1/messages"},
		{"runs", "/runs", "#runs", rid2},
		{"run", "/runs/manager/" + rid1, "#events", "taint private, clearance public / UserDeny / at gate"},
		{"prompts", "/prompts", "#prompts", "make docs"},
	}
	for _, p := range pages {
		b.Do(t, chromedp.Navigate("http://"+s.addr+p.path))
		b.WaitText(t, p.sel, p.want, 5*time.Second)
		if p.name == "jail" {
			if n := browser.Eval[int](t, b, `document.querySelectorAll("#diff .dadd").length`); n != 1 {
				t.Errorf("the ruleset diff shows %d added lines, want 1", n)
			}
		}
		if *updateScreenshots {
			ctx, cancel := context.WithTimeout(b.Context(), 30*time.Second)
			// Quality 100 is a PNG; under 100 Chromium sends a JPEG.
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join("..", "..", "docs", "dashboard", p.name+".png")
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(out, png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.Clean(t)
}

// TestBrowserLiveEvents: an event a run writes appears on its open page within 1 s.
func TestBrowserLiveEvents(t *testing.T) {
	src := demo(t)
	s := serve(t, src)
	src.start("manager", rid1, "coder")
	b := browser.New(t)
	login(t, b, s)
	b.Do(t, chromedp.Navigate("http://"+s.addr+"/runs/manager/"+rid1))
	b.WaitText(t, "#state", "live", 5*time.Second)
	b.WaitText(t, "#events", "run_start", 5*time.Second)
	var worst time.Duration
	for i := range 5 {
		tool := fmt.Sprintf("tool_%d", i)
		start := time.Now()
		src.emit("manager", rid1, events.Event{Type: events.ToolCall, Tool: tool, Decision: events.Allowed})
		b.WaitText(t, "#events tbody", tool, 5*time.Second)
		worst = max(worst, time.Since(start))
	}
	t.Logf("slowest of 5 live events to appear: %s", worst)
	if worst > time.Second {
		t.Errorf("a live event took %s to appear, want under 1 s", worst)
	}
	src.emit("manager", rid1, events.Event{Type: events.RunEnd, Status: "succeeded"})
	b.WaitText(t, "#state", "the run's events ended", 5*time.Second)
	b.Clean(t)
}

// TestBrowserGateLabels: a tool call's gate decision shows on the run page with the
// labels that drove it (the context's taint against the tool's clearance), its source
// and the step that refused; a call the gate passed within clearance shows its labels
// too (the control: no refusal step on it).
func TestBrowserGateLabels(t *testing.T) {
	src := demo(t)
	s := serve(t, src)
	src.start("manager", rid1, "coder")
	src.emit("manager", rid1, events.Event{Type: events.ToolCall, Call: "c1", Tool: "http_get", Decision: events.Allowed, Taint: "internal", Clearance: "internal"})
	src.emit("manager", rid1, events.Event{Type: events.Gate, Call: "c2", Tool: "http_post", Decision: events.Refused, Step: "gate", Source: "UserDeny", Taint: "private", Clearance: "public", Answer: "deny"})
	b := browser.New(t)
	login(t, b, s)
	b.Do(t, chromedp.Navigate("http://"+s.addr+"/runs/manager/"+rid1))
	b.WaitText(t, "#events", "UserDeny", 5*time.Second)
	rows := browser.Eval[[]string](t, b, `Array.from(document.querySelectorAll("#events tbody tr")).map(tr => tr.cells[3].textContent + "|" + tr.cells[4].textContent + "|" + tr.cells[5].textContent)`)
	want := []string{"http_get|allowed|taint internal, clearance internal", "http_post|refused|taint private, clearance public / UserDeny / at gate"}
	for _, w := range want {
		if !slices.Contains(rows, w) {
			t.Errorf("no row %q on the run page; rows: %q", w, rows)
		}
	}
	b.Clean(t)
}

// TestBrowserAnswer: a pending prompt is answered from the page; the answer reaches the
// run (its record and its events) as the terminal's would.
func TestBrowserAnswer(t *testing.T) {
	src := demo(t)
	s := serve(t, src)
	src.start("manager", rid1, "coder")
	src.ask("manager", rid1, runner.Question{ID: "q1", Tool: "web_fetch", Reason: "the context carries secret data", Gate: true})
	b := browser.New(t)
	login(t, b, s)
	b.Do(t, chromedp.Navigate("http://"+s.addr+"/prompts"))
	b.WaitText(t, "#prompts", "Taint gate: web_fetch", 5*time.Second)
	if got := src.answered(); len(got) != 0 {
		t.Fatalf("answered before the click: %v", got)
	}
	b.Do(t, chromedp.Click(chromedp.CSS(`#prompts button[value="session"]`)))
	b.WaitText(t, "#prompts", "No prompt is waiting", 5*time.Second)
	if got := src.answered(); len(got) != 1 || got[0] != "manager/"+rid1+"/q1=session" {
		t.Fatalf("answered %v, want the session answer", got)
	}
	b.Do(t, chromedp.Navigate("http://"+s.addr+"/runs/manager/"+rid1))
	b.WaitText(t, "#events", "answer: session", 5*time.Second)
	b.Clean(t)
}

// TestBrowserHostileText: a tool result, arguments and a blueprint name carrying a
// <script>, a javascript: link, an SVG onload and an img onerror render as text: no
// element is made from them, nothing runs, no dialog opens. The positive control: the
// payloads' text is on the page.
func TestBrowserHostileText(t *testing.T) {
	src := demo(t)
	src.jail.Acceptance = strings.Join(hostile, "\n")
	s := serve(t, src)
	src.start("manager", rid1, hostile[4])
	out, _ := json.Marshal(strings.Join(hostile, " ") + ` <script>alert(1)</script>`)
	src.emit("manager", rid1, events.Event{Type: events.ToolCall, Call: "c1", Tool: hostile[0], Args: hostileJSON(), Decision: events.Allowed, Source: hostile[3], Taint: hostile[1], Clearance: hostile[2]})
	src.emit("manager", rid1, events.Event{Type: events.ToolResult, Call: "c1", Tool: "read_file", Status: events.StatusOK, Output: out, Message: hostile[2]})
	src.ask("manager", rid1, runner.Question{ID: "q1", Tool: "shell", Args: hostileJSON(), Reason: hostile[0]})
	b := browser.New(t)
	login(t, b, s)
	for _, path := range []string{"/runs/manager/" + rid1, "/runs", "/prompts", "/"} {
		b.Do(t, chromedp.Navigate("http://"+s.addr+path))
		b.WaitText(t, "main", "window.__pwned", 5*time.Second)
		pwned := browser.Eval[bool](t, b, `window.__pwned !== undefined`)
		scripts := browser.Eval[int](t, b, `document.querySelectorAll("main script").length`)
		links := browser.Eval[int](t, b, `Array.from(document.querySelectorAll("a")).filter(a => a.href.startsWith("javascript:")).length`)
		svgs := browser.Eval[int](t, b, `document.querySelectorAll("main svg[onload], main svg script").length`)
		imgs := browser.Eval[int](t, b, `document.querySelectorAll("img").length`)
		if pwned || scripts != 0 || links != 0 || svgs != 0 || imgs != 0 {
			t.Errorf("%s: pwned %v, %d scripts, %d javascript: links, %d svg payloads, %d images made from the payloads", path, pwned, scripts, links, svgs, imgs)
		}
	}
	// The payloads are there, as text (positive control).
	b.Do(t, chromedp.Navigate("http://"+s.addr+"/runs/manager/"+rid1))
	for _, h := range []string{`<script>window.__pwned=1</script>`, `<svg onload=`, `javascript:window.__pwned=2`, `<script>alert(1)</script>`} {
		b.WaitText(t, "#events", h, 5*time.Second)
	}
	b.Clean(t)
}

// TestBrowserTokenRequired: without the token the browser gets no page; the printed URL
// works once, and a second browser with the same URL is refused.
func TestBrowserTokenRequired(t *testing.T) {
	s := serve(t, demo(t))
	b := browser.New(t)
	b.Do(t, chromedp.Navigate("http://"+s.addr+"/"))
	body := b.Text(t, "body")
	if !strings.Contains(body, "no dashboard session") || strings.Contains(body, "proj-7f3a") {
		t.Fatalf("without the token: %q", body)
	}
	login(t, b, s)
	body = b.Text(t, "body")
	if !strings.Contains(body, "proj-7f3a") {
		t.Fatalf("with the token the jail page is missing (positive control): %q", body)
	}
	other := browser.New(t)
	other.Do(t, chromedp.Navigate(s.srv.URL()))
	body = other.Text(t, "body")
	if !strings.Contains(body, "wrong or used token") {
		t.Fatalf("the token used again: %q", body)
	}
}

// TestBrowserCSPBlocksInlineScript: the CSP the pages carry is in force in the browser:
// an inline script put into the page (what a markup injection would amount to) does not
// run, and the violation is reported where TestBrowserPages looks for problems (which
// also proves that watch sees what a page reports: a console.error is caught too).
func TestBrowserCSPBlocksInlineScript(t *testing.T) {
	src := demo(t)
	s := serve(t, src)
	src.start("manager", rid1, "coder")
	b := browser.New(t)
	login(t, b, s)
	browser.Eval[bool](t, b, `(function(){const e=document.createElement("script");e.textContent="window.__inline=1";document.body.appendChild(e);return true})()`)
	browser.Eval[bool](t, b, `(function(){console.error("dashboard-probe");return true})()`)
	time.Sleep(300 * time.Millisecond)
	if browser.Eval[bool](t, b, `window.__inline !== undefined`) {
		t.Fatal("an inline script ran under the dashboard's CSP")
	}
	got := strings.Join(b.TakeProblems(), "\n")
	if !strings.Contains(got, "Content Security Policy") || !strings.Contains(got, "dashboard-probe") {
		t.Fatalf("the browser watch saw %q; want the CSP violation and the probe", got)
	}
	// The page's own script still runs (positive control): the run page goes live.
	b.Do(t, chromedp.Navigate("http://"+s.addr+"/runs/manager/"+rid1))
	b.WaitText(t, "#state", "live", 5*time.Second)
	b.WaitText(t, "#events", "run_start", 5*time.Second)
}
