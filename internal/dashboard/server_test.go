package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// served is a dashboard on a real loopback listener.
type served struct {
	srv   *Server
	addr  string
	token string
	src   *runFiles
}

func serve(t *testing.T, src *runFiles) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(src, ln.Addr().String(), tok)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return &served{srv: s, addr: ln.Addr().String(), token: tok, src: src}
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}

func (s *served) do(t *testing.T, method, path, host string, hdr map[string]string, body url.Values) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = strings.NewReader(body.Encode())
	}
	req, err := http.NewRequest(method, "http://"+s.addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// login exchanges the token and returns the session cookie header and the CSRF token.
func (s *served) login(t *testing.T) (cookie, csrf string) {
	t.Helper()
	resp, _ := s.do(t, "GET", "/?token="+s.token, "", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("token exchange: %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	cs := resp.Cookies()
	if len(cs) != 1 || cs[0].Name != CookieName || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("token exchange set %v, want one HttpOnly SameSite=Strict %s cookie", cs, CookieName)
	}
	s.srv.mu.Lock()
	csrf = s.srv.sessions[cs[0].Value]
	s.srv.mu.Unlock()
	return CookieName + "=" + cs[0].Value, csrf
}

func newJailSource(t *testing.T) *runFiles {
	src := newRunFiles(t)
	src.jail = Jail{Instance: "proj-7f3a", Backend: "lima", Guest: []string{"reachable", "provisioned"}, Posture: "closed", Verified: true}
	return src
}

// TestTokenRequired: every page needs the session the one-time token is exchanged for.
// The attacks (no token, a wrong one, the right one used twice, a forged cookie) get no
// page; the positive control (the printed URL, then the cookie) gets the jail page.
func TestTokenRequired(t *testing.T) {
	s := serve(t, newJailSource(t))
	for _, path := range []string{"/", "/broker", "/runs", "/prompts", "/runs/manager/" + rid1 + "/events", "/static/app.js"} {
		if resp, body := s.do(t, "GET", path, "", nil, nil); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "proj-7f3a") {
			t.Errorf("GET %s without a session: %d %q, want 401", path, resp.StatusCode, body)
		}
	}
	if resp, _ := s.do(t, "GET", "/?token="+strings.Repeat("0", 64), "", nil, nil); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("a wrong token: %d, cookies %v; want 403 and none", resp.StatusCode, resp.Cookies())
	}
	if resp, _ := s.do(t, "GET", "/", "", map[string]string{"Cookie": CookieName + "=" + strings.Repeat("a", 64)}, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged cookie: %d, want 401", resp.StatusCode)
	}
	cookie, _ := s.login(t)
	resp, body := s.do(t, "GET", "/", "", map[string]string{"Cookie": cookie}, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "proj-7f3a") {
		t.Fatalf("the session's GET /: %d, want 200 with the jail page (positive control)", resp.StatusCode)
	}
	if resp, _ := s.do(t, "GET", "/?token="+s.token, "", nil, nil); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("the token used a second time: %d, want 403 and no cookie", resp.StatusCode)
	}
}

// TestHostChecked: a DNS-rebinding page reaches 127.0.0.1 under its own name; every Host
// but 127.0.0.1:PORT is refused, the session cookie notwithstanding.
func TestHostChecked(t *testing.T) {
	s := serve(t, newJailSource(t))
	cookie, _ := s.login(t)
	_, port, _ := net.SplitHostPort(s.addr)
	for _, host := range []string{"evil.example:" + port, "localhost:" + port, "127.0.0.1", "127.0.0.1:1", "[::1]:" + port, "127.0.0.1." + ":" + port} {
		resp, body := s.do(t, "GET", "/", host, map[string]string{"Cookie": cookie}, nil)
		if resp.StatusCode != http.StatusMisdirectedRequest || strings.Contains(body, "proj-7f3a") {
			t.Errorf("Host %q: %d, want 421 and no page", host, resp.StatusCode)
		}
	}
	// The token exchange is Host-checked too: a rebinding page cannot log itself in.
	if resp, _ := s.do(t, "GET", "/?token="+s.token, "evil.example:"+port, nil, nil); resp.StatusCode != http.StatusMisdirectedRequest || len(resp.Cookies()) != 0 {
		t.Errorf("the token under a foreign Host: %d, want 421 and no cookie", resp.StatusCode)
	}
	if resp, _ := s.do(t, "GET", "/", s.addr, map[string]string{"Cookie": cookie}, nil); resp.StatusCode != 200 {
		t.Fatalf("Host %s: %d, want 200 (positive control)", s.addr, resp.StatusCode)
	}
}

// TestPostNeedsOriginAndCSRF: an answer is a POST that must come from the dashboard's own
// page: the session cookie, the exact Origin and the session's CSRF token. Each attack
// leaves the prompt pending and nothing answered; the positive control answers it.
func TestPostNeedsOriginAndCSRF(t *testing.T) {
	src := newJailSource(t)
	s := serve(t, src)
	src.start("manager", rid1, "coder")
	src.ask("manager", rid1, runner.Question{ID: "q1", Tool: "shell", Args: json.RawMessage(`{"command":"make"}`), Reason: "shell is ask"})
	cookie, csrf := s.login(t)
	origin := "http://" + s.addr
	form := func(tok string) url.Values {
		return url.Values{"agent": {"manager"}, "run": {rid1}, "question": {"q1"}, "answer": {"once"}, "csrf": {tok}}
	}
	attacks := []struct {
		name string
		hdr  map[string]string
		body url.Values
		want int
	}{
		{"no session", map[string]string{"Origin": origin}, form(csrf), 401},
		{"no Origin", map[string]string{"Cookie": cookie}, form(csrf), 403},
		{"a foreign Origin", map[string]string{"Cookie": cookie, "Origin": "http://evil.example"}, form(csrf), 403},
		{"the null Origin", map[string]string{"Cookie": cookie, "Origin": "null"}, form(csrf), 403},
		{"localhost Origin", map[string]string{"Cookie": cookie, "Origin": "http://localhost:" + strings.Split(s.addr, ":")[1]}, form(csrf), 403},
		{"no CSRF token", map[string]string{"Cookie": cookie, "Origin": origin}, form(""), 403},
		{"a wrong CSRF token", map[string]string{"Cookie": cookie, "Origin": origin}, form(strings.Repeat("b", 64)), 403},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			resp, _ := s.do(t, "POST", "/prompts/answer", "", a.hdr, a.body)
			if resp.StatusCode != a.want {
				t.Errorf("%d, want %d", resp.StatusCode, a.want)
			}
			if got := src.answered(); len(got) != 0 {
				t.Fatalf("answered %v", got)
			}
			if ps, _ := src.Prompts(context.Background()); len(ps) != 1 {
				t.Fatalf("the prompt is no longer pending: %v", ps)
			}
		})
	}
	resp, _ := s.do(t, "POST", "/prompts/answer", "", map[string]string{"Cookie": cookie, "Origin": origin}, form(csrf))
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the page's own POST: %d, want 303 (positive control)", resp.StatusCode)
	}
	if got := src.answered(); len(got) != 1 || got[0] != "manager/"+rid1+"/q1=once" {
		t.Fatalf("answered %v, want manager/%s/q1=once", got, rid1)
	}
}

// TestAnswerSemantics: the page takes what the terminal takes (lev run's prompter, lev
// answer): once or deny for a permission prompt, once, session or deny for a gate
// prompt, text for ask_operator (empty: the terminal's empty line, "the operator gave no
// answer"), and only for the question pending now. A refused answer changes nothing.
func TestAnswerSemantics(t *testing.T) {
	src := newJailSource(t)
	s := serve(t, src)
	src.start("manager", rid1, "coder")
	src.ask("manager", rid1, runner.Question{ID: "q1", Tool: "web_fetch", Reason: "the context is tainted", Gate: true})
	src.start("docs", rid2, "writer")
	src.ask("docs", rid2, runner.Question{ID: "q3", Tool: "ask_operator", Reason: "which branch?", Operator: true})
	src.start("manager", rid3, "coder")
	src.ask("manager", rid3, runner.Question{ID: "q1", Tool: "shell", Reason: `permission is "ask"`})
	cookie, csrf := s.login(t)
	hdr := map[string]string{"Cookie": cookie, "Origin": "http://" + s.addr}
	post := func(agent, run, q, ans string) int {
		resp, _ := s.do(t, "POST", "/prompts/answer", "", hdr, url.Values{"agent": {agent}, "run": {run}, "question": {q}, "answer": {ans}, "csrf": {csrf}})
		return resp.StatusCode
	}
	cases := []struct {
		name             string
		agent, run, q, a string
		want             int
		answered         string
	}{
		{"yes is not a gate answer", "manager", rid1, "q1", "yes", 400, ""},
		{"empty gate answer", "manager", rid1, "q1", "", 400, ""},
		{"a question not pending", "manager", rid1, "q2", "once", 409, ""},
		{"a run of another agent", "docs", rid1, "q1", "once", 409, ""},
		{"session to a permission prompt", "manager", rid3, "q1", "session", 400, ""},
		{"permission: once", "manager", rid3, "q1", "once", 303, "manager/" + rid3 + "/q1=once"},
		{"operator: over the cap", "docs", rid2, "q3", strings.Repeat("x", MaxOperatorAnswer+1), 400, ""},
		{"gate: session", "manager", rid1, "q1", "session", 303, "manager/" + rid1 + "/q1=session"},
		{"answered already", "manager", rid1, "q1", "once", 409, ""},
		{"operator: text", "docs", rid2, "q3", "main, please", 303, "docs/" + rid2 + "/q3=main, please"},
		{"operator: blank text is no answer", "docs", rid2, "q4", "  ", 303, "docs/" + rid2 + "/q4=" + runner.NoOperatorAnswer},
	}
	n := 0
	for _, c := range cases {
		if c.q == "q4" {
			src.ask("docs", rid2, runner.Question{ID: "q4", Tool: "ask_operator", Reason: "and the tag?", Operator: true})
		}
		if got := post(c.agent, c.run, c.q, c.a); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
		got := src.answered()
		if c.answered != "" {
			n++
		}
		if len(got) != n || (c.answered != "" && got[n-1] != c.answered) {
			t.Fatalf("%s: answered %v", c.name, got)
		}
	}
}

// TestHeaders: every response, refusals included, carries the strict CSP and nosniff,
// and none carries CORS headers (a preflight is answered like any request without a
// session).
func TestHeaders(t *testing.T) {
	s := serve(t, newJailSource(t))
	cookie, _ := s.login(t)
	reqs := []struct {
		method, path string
		hdr          map[string]string
	}{
		{"GET", "/", map[string]string{"Cookie": cookie}},
		{"GET", "/static/app.js", map[string]string{"Cookie": cookie}},
		{"GET", "/", nil},
		{"OPTIONS", "/prompts/answer", map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}},
	}
	for _, r := range reqs {
		resp, _ := s.do(t, r.method, r.path, "", r.hdr, nil)
		h := resp.Header
		if h.Get("Content-Security-Policy") != CSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s: headers %v", r.method, r.path, h)
		}
		for k := range h {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("%s %s: CORS header %s", r.method, r.path, k)
			}
		}
	}
	if resp, body := s.do(t, "GET", "/static/app.js", "", map[string]string{"Cookie": cookie}, nil); !strings.Contains(resp.Header.Get("Content-Type"), "javascript") || !strings.Contains(body, "EventSource") {
		t.Fatalf("app.js: %q (positive control: the embedded script is served)", resp.Header.Get("Content-Type"))
	}
}

// TestHostileTextEscaped: names, arguments and reasons from the jail are HTML-escaped on
// the server-rendered pages (the live events are rendered as text by the script: the
// browser test).
func TestHostileTextEscaped(t *testing.T) {
	src := newJailSource(t)
	src.jail.Acceptance = hostile[0]
	src.jail.Live, src.jail.Desired = []string{"-A LEVER_EGRESS -j DROP", hostile[2]}, []string{"-A LEVER_EGRESS -j DROP"}
	src.broker.Audit = []AuditLine{{Time: time.Now(), Who: hostile[3], Route: hostile[1], Outcome: "ok"}}
	s := serve(t, src)
	src.start("manager", rid1, hostile[4])
	src.ask("manager", rid1, runner.Question{ID: "q1", Tool: "shell", Args: hostileJSON(), Reason: hostile[0]})
	cookie, _ := s.login(t)
	for _, path := range []string{"/", "/broker", "/runs", "/prompts"} {
		_, body := s.do(t, "GET", path, "", map[string]string{"Cookie": cookie}, nil)
		for _, h := range hostile {
			if strings.Contains(body, h) {
				t.Errorf("GET %s carries %q unescaped", path, h)
			}
		}
		if strings.Count(body, "<script") != 1 || strings.Contains(body, "<a href=\"javascript") || strings.Contains(body, "<svg onload") || strings.Contains(body, "<img src=x") {
			t.Errorf("GET %s: markup from the jail made it into the page:\n%s", path, body)
		}
		if !strings.Contains(body, "&lt;script&gt;") && !strings.Contains(body, "&lt;svg") && !strings.Contains(body, "&lt;img") && !strings.Contains(body, "&#34;&gt;&lt;script") {
			t.Errorf("GET %s does not show the hostile text (positive control):\n%s", path, body)
		}
	}
}

// TestEventsStream: a run's events arrive as Server-Sent Events in order, as they are
// written, and the stream ends with the run.
func TestEventsStream(t *testing.T) {
	src := newJailSource(t)
	s := serve(t, src)
	src.start("manager", rid1, "coder")
	cookie, _ := s.login(t)
	req, _ := http.NewRequest("GET", "http://"+s.addr+"/runs/manager/"+rid1+"/events", nil)
	req.Header.Set("Cookie", cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	next := func() (string, string) {
		var ev, data string
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "event: "):
				ev = l[7:]
			case strings.HasPrefix(l, "data: "):
				data = l[6:]
			case l == "" && ev != "":
				return ev, data
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return "", ""
	}
	if ev, data := next(); ev != "lev" || !strings.Contains(data, `"run_start"`) {
		t.Fatalf("first message %s %s", ev, data)
	}
	start := time.Now()
	src.emit("manager", rid1, events.Event{Type: events.ToolCall, Tool: "shell", Decision: events.Allowed})
	if ev, data := next(); ev != "lev" || !strings.Contains(data, `"tool_call"`) {
		t.Fatalf("second message %s %s", ev, data)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a live event took %s to arrive", d)
	}
	src.emit("manager", rid1, events.Event{Type: events.RunEnd, Status: "succeeded"})
	if ev, _ := next(); ev != "lev" {
		t.Fatalf("run_end: %s", ev)
	}
	if ev, _ := next(); ev != "end" {
		t.Fatalf("after run_end: %s, want end", ev)
	}
}

// TestNewRefusesOtherAddresses: the dashboard is for 127.0.0.1 only.
func TestNewRefusesOtherAddresses(t *testing.T) {
	tok, _ := NewToken()
	for _, a := range []string{"0.0.0.0:8080", "[::1]:8080", "localhost:8080", "192.168.1.2:80", "127.0.0.1:0", "127.0.0.1"} {
		if _, err := New(newRunFiles(t), a, tok); err == nil {
			t.Errorf("New(%q) took it", a)
		}
	}
	if _, err := New(newRunFiles(t), "127.0.0.1:8080", "short"); err == nil {
		t.Error("a short token was taken")
	}
	if _, err := New(newRunFiles(t), "127.0.0.1:8080", tok); err != nil {
		t.Fatalf("127.0.0.1:8080: %v (positive control)", err)
	}
}

func TestDiff(t *testing.T) {
	cases := []struct {
		desired, live []string
		want          string
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, " a| b"},
		{[]string{"a", "b", "c"}, []string{"a", "c"}, " a|-b| c"},
		{[]string{"a", "c"}, []string{"a", "x", "c"}, " a|+x| c"},
		{[]string{"a"}, []string{"b"}, "+b|-a"},
		{nil, []string{"a"}, "+a"},
	}
	for _, c := range cases {
		var parts []string
		for _, l := range Diff(c.desired, c.live) {
			parts = append(parts, l.Op+l.Text)
		}
		if got := strings.Join(parts, "|"); got != c.want {
			t.Errorf("Diff(%v, %v) = %q, want %q", c.desired, c.live, got, c.want)
		}
	}
}

func TestUsageChart(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	audit := []AuditLine{
		{Time: t0, Who: "manager"}, {Time: t0.Add(time.Minute), Who: "manager", Tokens: 100},
		{Time: t0.Add(10 * time.Minute), Who: "docs"}, {Time: t0.Add(5 * time.Minute), Who: "-"},
	}
	c := UsageChart(audit, 4)
	if len(c.Series) != 2 || c.Series[0].Agent != "docs" || c.Series[1].Agent != "manager" {
		t.Fatalf("series %+v", c.Series)
	}
	if c.Series[1].Requests != 2 || c.Series[0].Requests != 1 || c.Series[1].TokenSum != 100 || c.MaxRequests != 2 {
		t.Fatalf("counts %+v max %d", c.Series, c.MaxRequests)
	}
	if n := len(strings.Fields(c.Series[0].Points)); n != 4 {
		t.Fatalf("%d points, want 4", n)
	}
	if e := UsageChart(nil, 4); len(e.Series) != 0 {
		t.Fatal("an empty audit drew a series")
	}
}
