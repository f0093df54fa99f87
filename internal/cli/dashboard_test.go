package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/dashboard"
	"github.com/lever-jail/lever/internal/lev/events"
)

// TestDashboardCommand: lever dashboard prints a 127.0.0.1 URL with a token, serves the
// runs lever ps lists (the same lev ps --json calls, through the same attach), refuses a
// request without the token, and stops on its context.
func TestDashboardCommand(t *testing.T) {
	rec := &recorder{runs: map[string]string{mgrC: runsM, docsC: `[{"id":"r-20261130-090000-bbbbbb","agent":"<script>x()</script>","status":"completed","created":"2026-11-30T09:00:00Z"}]`}}
	cfg := unitJail(t, rec)
	pr, pw := io.Pipe()
	root := NewRoot(pw, io.Discard)
	root.SetArgs([]string{"dashboard", "-c", cfg, "--no-open"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx); pw.Close() }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL printed: %v (the command: %v)", err, <-done)
	}
	go io.Copy(io.Discard, pr)
	i := strings.Index(line, "http://")
	if i < 0 || !strings.HasPrefix(line, "lever dashboard for jail unit: http://127.0.0.1:") {
		t.Fatalf("printed %q", line)
	}
	u, err := url.Parse(strings.TrimSpace(line[i:]))
	if err != nil || u.Hostname() != "127.0.0.1" || u.Query().Get("token") == "" {
		t.Fatalf("URL %q", line[i:])
	}
	base := "http://" + u.Host
	if resp, err := http.Get(base + "/runs"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %v %v", resp, err)
	}
	jar := &cookieJar{}
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	if resp, err := c.Get(u.String()); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the printed URL: %v %v", resp, err)
	}
	resp, err := c.Get(base + "/runs")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/runs: %v %v", resp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	for _, want := range []string{"r-20261130-100000-aaaaaa", "starter", "1/2 work", "r-20261130-090000-bbbbbb", "&lt;script&gt;x()&lt;/script&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("/runs lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>x()") {
		t.Error("/runs carries a blueprint name as markup")
	}
	// The jail page derives lever status afresh; here it cannot (no lev binary beside the
	// test binary), and says so on the page instead of ending the dashboard.
	resp, err = c.Get(base + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/: %v %v", resp, err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "no lev binary") || !strings.Contains(string(b), "unit") {
		t.Errorf("/ does not show the status error:\n%s", b)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after the context ended: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the dashboard did not stop with its context")
	}
}

// cookieJar keeps the one session cookie (the test talks to one origin).
type cookieJar struct{ cs []*http.Cookie }

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) { j.cs = append(j.cs, cs...) }
func (j *cookieJar) Cookies(*url.URL) []*http.Cookie          { return j.cs }

// TestDashboardBadPort: a port that is none is exit 2 before anything listens.
func TestDashboardBadPort(t *testing.T) {
	cfg := unitJail(t, &recorder{})
	for _, p := range []string{"-1", "65536"} {
		code, out, errs := lever("dashboard", "-c", cfg, "--no-open", "--port", p)
		if code != 2 || out != "" || !strings.Contains(errs, "--port "+p+" is not a port") {
			t.Errorf("--port %s: exit %d, %q %q", p, code, out, errs)
		}
	}
}

// TestPendingAsks: a prompt is pending from its ask event until its answer or the run's
// end.
func TestPendingAsks(t *testing.T) {
	ask := func(q string) string {
		return `{"id":1,"type":"ask","question":"` + q + `","tool":"shell","message":"shell is ask","args":{"command":"make"}}`
	}
	cases := []struct {
		name  string
		lines []string
		want  []string
	}{
		{"none", []string{`{"id":1,"type":"run_start"}`}, nil},
		{"one pending", []string{ask("q1")}, []string{"q1"}},
		{"answered", []string{ask("q1"), `{"type":"answer","question":"q1","answer":"once"}`}, nil},
		{"second pending", []string{ask("q1"), `{"type":"answer","question":"q1"}`, ask("q2")}, []string{"q2"}},
		{"another answered", []string{ask("q1"), `{"type":"answer","question":"q9"}`}, []string{"q1"}},
		{"run ended", []string{ask("q1"), `{"type":"run_end"}`}, nil},
		{"a bad line is skipped", []string{"not json", ask("q3")}, []string{"q3"}},
	}
	for _, c := range cases {
		got := pendingAsks("manager", "r-1", []byte(strings.Join(c.lines, "\n")+"\n"))
		var ids []string
		for _, p := range got {
			ids = append(ids, p.ID)
			if p.Agent != "manager" || p.Run != "r-1" || p.Tool != "shell" || p.Reason != "shell is ask" || p.Args != `{"command":"make"}` {
				t.Errorf("%s: prompt %+v", c.name, p)
			}
		}
		if strings.Join(ids, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: pending %v, want %v", c.name, ids, c.want)
		}
	}
}

// TestReadAuditTail: the broker page reads the audit log's last bytes as records; a cut
// first line and a line that is no record are skipped; no log is no error.
func TestReadAuditTail(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "audit.jsonl")
	if got, err := readAuditTail(p, 1<<10); err != nil || got != nil {
		t.Fatalf("no log: %v %v", got, err)
	}
	var b strings.Builder
	for i := range 50 {
		b.WriteString(`{"time":"2026-12-05T09:00:00Z","who":"manager","listener":"jail","route":"/llm/v1/messages","status":200,"outcome":"ok","bytes_in":1,"bytes_out":2,"duration_ms":3,"detail":"n` + strings.Repeat("x", i) + `"}` + "\n")
	}
	b.WriteString("garbage\n")
	os.WriteFile(p, []byte(b.String()), 0o600)
	got, err := readAuditTail(p, 1<<10)
	if err != nil || len(got) == 0 || len(got) >= 50 {
		t.Fatalf("tail of 1 KiB: %d lines, %v", len(got), err)
	}
	last := got[len(got)-1]
	want := dashboard.AuditLine{Time: last.Time, Who: "manager", Route: "/llm/v1/messages", Status: 200, Outcome: "ok", Detail: "n" + strings.Repeat("x", 49)}
	if last != want {
		t.Fatalf("last line %+v, want %+v", last, want)
	}
	all, _ := readAuditTail(p, 1<<20)
	if len(all) != 50 {
		t.Fatalf("whole log: %d lines, want 50", len(all))
	}
}

// TestDashboardEvents: the run page's stream is lev logs --follow --json of the run, in
// the container of the agent named; a run reference that is no run of this jail is
// refused before any exec, and a line that is no event ends the stream naming the run.
func TestDashboardEvents(t *testing.T) {
	const id = "r-20261130-090000-bbbbbb"
	good := `{"id":1,"type":"run_start","run":"` + id + `"}` + "\n" + `{"id":2,"type":"tool_call","tool":"<b>shell</b>","decision":"allowed"}` + "\n"
	cases := []struct {
		name, agent, run, logs string
		types                  []string
		err                    string
		execs                  int
	}{
		{"the run's events", "docs", id, good, []string{"run_start", "tool_call"}, "", 1},
		{"a line that is no event", "docs", id, good + "not json\n", []string{"run_start", "tool_call"}, "run docs/" + id + ": lev logs printed a line that is not an event", 1},
		{"an agent not in lever.yaml", "nope", id, good, nil, `worker "nope"`, 0},
		{"an id that is no run id", "docs", "--all", good, nil, "is not a lev run id", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{logs: map[string]string{docsC: c.logs}}
			cfgPath := unitJail(t, rec)
			cmd := newDashboardCmd()
			cfg, err := loadConfig(cmd, cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			src, _ := newJailSource(cmd, cfg)
			var types []string
			err = src.Events(context.Background(), c.agent, c.run, func(ev events.Event) error {
				types = append(types, string(ev.Type))
				return nil
			})
			if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
			if strings.Join(types, ",") != strings.Join(c.types, ",") {
				t.Errorf("events %v, want %v", types, c.types)
			}
			if len(rec.calls) != c.execs {
				t.Fatalf("%d execs, want %d: %v", len(rec.calls), c.execs, rec.calls)
			}
			if c.execs == 1 {
				want := []string{levPath, "logs", "--follow", "--json", "--", id}
				if got := rec.calls[0]; got.container != docsC || strings.Join(got.argv, " ") != strings.Join(want, " ") || got.tty || got.stdin {
					t.Errorf("exec %+v, want %v in %s without a terminal or stdin", got, want, docsC)
				}
			}
		})
	}
}
