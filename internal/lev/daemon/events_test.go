package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// A shell call that blocks until the test lets it go: the run is provably in the middle
// of that call while its events are read.
const liveBlueprint = `
name = "live"
version = "1"
[stages.work]
prompt = "work"
tools = ["shell", "submit_output"]
`

// collect streams a run's events into a channel until the stream ends.
func collect(ctx context.Context, c *Client, id string, after int64) (<-chan events.Event, <-chan error) {
	ch, errc := make(chan events.Event, 1024), make(chan error, 1)
	go func() {
		_, err := c.Events(ctx, id, after, func(ev *events.Event) error { ch <- *ev; return nil })
		close(ch)
		errc <- err
	}()
	return ch, errc
}

func readFileEvents(t *testing.T, path string) []events.Event {
	t.Helper()
	tl, err := events.NewTail(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	evs, err := tl.Next(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestEventsLiveInOrderAndResumable: the events of a run arrive over SSE while the run is
// going: the shell call's tool_call event is seen while the call itself is still blocked
// (the run's status is running and the command has not finished), and only then does the
// test let the command finish. A reader that drops off mid-run and comes back with
// Last-Event-ID gets the rest with no duplicate and no gap; every after=N of the finished
// run (query and header) gives exactly the events past N; events.jsonl holds the same.
func TestEventsLiveInOrderAndResumable(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	script := filepath.Join(root, "script.toml")
	write(t, script, modelScript("live-script.toml"))
	e := start(t, scriptedConfig(script))
	write(t, filepath.Join(e.levHome, "agents", "live.toml"), liveBlueprint)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	rec, err := e.client.Spawn(ctx, runner.Spec{Agent: "live", Workdir: e.wd, Allow: []string{"shell"}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.FirstEvent != 1 {
		t.Fatalf("first_event = %d, want 1", rec.FirstEvent)
	}
	// First reader: until the shell call's tool_call event, then it hangs up.
	rctx, rcancel := context.WithCancel(ctx)
	ch, _ := collect(rctx, e.client, rec.ID, 0)
	var seen []events.Event
	var lag time.Duration
	for ev := range ch {
		// Event latency: from the engine's timestamp to this reader (same clock).
		if d := time.Since(ev.Time); d > lag {
			lag = d
		}
		seen = append(seen, ev)
		if ev.Type == events.ToolCall && ev.Tool == "shell" {
			break
		}
	}
	rcancel()
	t.Logf("event latency, emit to SSE reader: max %s over %d events", lag, len(seen))
	last := seen[len(seen)-1]
	if last.Type != events.ToolCall || last.Decision != events.Allowed || !strings.Contains(string(last.Args), "release") {
		t.Fatalf("did not see the shell call's decision live; got %+v", seen)
	}
	// Liveness: the call has not run to its end, and the run is still going.
	got, err := e.client.Get(ctx, rec.ID)
	if err != nil || got.Status != runner.StatusRunning {
		t.Fatalf("run is %v (%v) while its shell call should be blocked", got.Status, err)
	}
	for _, ev := range seen {
		if ev.Type == events.ToolResult || ev.Type == events.RunEnd {
			t.Fatalf("saw %s before the call was released: events are not live", ev.Type)
		}
	}
	// Second reader: resumes from the last id it saw; then the call is released.
	ch2, errc2 := collect(ctx, e.client, rec.ID, last.ID)
	os.WriteFile(filepath.Join(e.wd, "release"), nil, 0o644)
	for ev := range ch2 {
		seen = append(seen, ev)
	}
	if err := <-errc2; err != nil {
		t.Fatalf("stream: %v", err)
	}
	var types []string
	for i, ev := range seen {
		if ev.ID != int64(i+1) || ev.Run != rec.ID {
			t.Fatalf("event %d has id %d run %s: a gap or a duplicate in %+v", i, ev.ID, ev.Run, seen)
		}
		types = append(types, string(ev.Type))
	}
	want := "run_start,stage_start,turn,tool_call,tool_result,turn,tool_call,tool_result,stage_end,result,run_end"
	if strings.Join(types, ",") != want {
		t.Fatalf("events\n got %s\nwant %s", strings.Join(types, ","), want)
	}
	if end := seen[len(seen)-1]; end.Status != events.Status(runner.StatusCompleted) {
		t.Fatalf("run_end %+v", end)
	}
	if res := seen[len(seen)-2]; !strings.Contains(string(res.Output), "released") {
		t.Fatalf("result event %+v", res)
	}
	// The record holds the same events.
	file := readFileEvents(t, filepath.Join(e.levHome, "runs", rec.ID, events.FileName))
	if len(file) != len(seen) {
		t.Fatalf("events.jsonl has %d events, the stream %d", len(file), len(seen))
	}
	for i := range file {
		a, _ := json.Marshal(file[i])
		b, _ := json.Marshal(seen[i])
		if string(a) != string(b) {
			t.Fatalf("event %d differs:\n file %s\n sse  %s", i, a, b)
		}
	}
	// Resume from every id, by query and by header: exactly the events after it.
	for n := 0; n <= len(seen); n++ {
		for _, how := range []string{"query", "header"} {
			ids := sseIDs(t, e.base, rec.ID, int64(n), how)
			if len(ids) != len(seen)-n {
				t.Fatalf("after=%d (%s): %d events, want %d", n, how, len(ids), len(seen)-n)
			}
			for k, id := range ids {
				if id != int64(n+k+1) {
					t.Fatalf("after=%d (%s): ids %v", n, how, ids)
				}
			}
		}
	}
}

// sseIDs reads a whole SSE response with raw HTTP and returns its event ids.
func sseIDs(t *testing.T, base, id string, after int64, how string) []int64 {
	t.Helper()
	u := base + "/api/agents/" + id + "/events"
	if how == "query" {
		u += fmt.Sprintf("?after=%d", after)
	}
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if how == "header" {
		req.Header.Set("Last-Event-ID", fmt.Sprint(after))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%s: %d %s", u, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var ids []int64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 2<<20)
	for sc.Scan() {
		var n int64
		if _, err := fmt.Sscanf(sc.Text(), "id: %d", &n); err == nil {
			ids = append(ids, n)
		}
	}
	return ids
}

// TestEventsStalledReaderDoesNotBlockTheRun: a client opens the event stream of a run that
// emits megabytes of events and never reads (a 4 KiB receive buffer). The run completes
// anyway, promptly; the stalled stream is then cut (its writes blocked past WriteGrace),
// which shows the reader really was stalled: it never got the run's end. A reader that
// does read (control) gets every event.
func TestEventsStalledReaderDoesNotBlockTheRun(t *testing.T) {
	old := WriteGrace
	WriteGrace = time.Second
	defer func() { WriteGrace = old }()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	script := filepath.Join(root, "script.toml")
	// One turn of many calls, each event near its size cap: several MB of events, more
	// than the loopback socket buffers hold.
	long := strings.Repeat("x", 1500)
	var sc strings.Builder
	sc.WriteString("[[rule]]\nstage = \"s\"\nturn = 1\n")
	const calls = 2500
	for i := 0; i < calls; i++ {
		fmt.Fprintf(&sc, "[[rule.call]]\ntool = \"read_file\"\nargs = '{\"path\": \"missing-%d-%s\"}'\n", i, long)
	}
	sc.WriteString("[[rule]]\nstage = \"s\"\nturn = 2\ntext = \"done\"\n")
	write(t, script, sc.String())
	e := start(t, scriptedConfig(script))
	write(t, filepath.Join(e.levHome, "agents", "many.toml"), "name = \"many\"\nversion = \"1\"\n[stages.s]\nprompt = \"p\"\ntools = [\"read_file\"]\n")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// Spawn, then at once a stalled reader on the stream.
	rec, err := e.client.Spawn(ctx, runner.Spec{Agent: "many", Workdir: e.wd})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "GET /api/agents/%s/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", rec.ID, token)

	start := time.Now()
	done, err := e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
	if err != nil {
		t.Fatalf("the run did not finish with a stalled reader: %v", err)
	}
	took := time.Since(start)
	if done.Status != runner.StatusCompleted {
		t.Fatalf("status %s: %s", done.Status, done.Error)
	}
	info, _ := os.Stat(filepath.Join(e.levHome, "runs", rec.ID, events.FileName))
	t.Logf("run of %d calls finished in %s with a stalled reader; %d bytes of events", calls, took, info.Size())

	// Now read the stalled stream: it must have been cut before its end.
	time.Sleep(2 * WriteGrace)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReaderSize(conn, 1<<20)
	sawEnd := false
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "event: run_end") {
			sawEnd = true
		}
		if err != nil {
			t.Logf("stalled stream ended: %v after %s", err, time.Since(start))
			break
		}
	}
	if sawEnd {
		t.Fatalf("the stalled reader got the whole stream: the test did not stall it (raise calls)")
	}
	// Control: a reader that reads gets every event, ending with run_end.
	ids := sseIDs(t, e.base, rec.ID, 0, "query")
	if int64(len(ids)) != readLastID(t, filepath.Join(e.levHome, "runs", rec.ID, events.FileName)) || len(ids) < 2*calls {
		t.Fatalf("control reader got %d events", len(ids))
	}
}

func readLastID(t *testing.T, p string) int64 {
	n, err := events.LastID(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEventsAuth: the events endpoint is behind the bearer token like the others.
func TestEventsAuth(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	script := filepath.Join(root, "script.toml")
	write(t, script, modelScript("say-hi.toml"))
	e := start(t, scriptedConfig(script))
	write(t, filepath.Join(e.levHome, "agents", "hi.toml"), "name = \"hi\"\nversion = \"1\"\n[stages.s]\nprompt = \"p\"\ntools = []\n")
	rec, err := e.client.Spawn(context.Background(), runner.Spec{Agent: "hi", Workdir: e.wd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Wait(context.Background(), rec.ID, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	path := "/api/agents/" + rec.ID + "/events"
	for _, c := range []struct {
		name, path, auth string
		want             int
	}{
		{"no token", path, "", 401},
		{"wrong token", path, "Bearer wrong-token-0123456789abcdef", 401},
		{"token without Bearer", path, token, 401},
		{"right token (control)", path, "Bearer " + token, 200},
		{"unknown run", "/api/agents/r-20260101-000000-abcdef/events", "Bearer " + token, 404},
		{"traversal id", "/api/agents/..%2f..%2fetc/events", "Bearer " + token, 404},
		{"bad after", path + "?after=-1", "Bearer " + token, 400},
		{"bad after text", path + "?after=x", "Bearer " + token, 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", e.base+c.path, nil)
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := make([]byte, 64<<10)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("%d, want %d: %s", resp.StatusCode, c.want, body[:n])
			}
			if c.want == 401 && strings.Contains(string(body[:n]), "run_start") {
				t.Fatalf("events leaked without the token")
			}
		})
	}
}

// TestEventsUnwritableFailsTheResume: a run whose events.jsonl cannot be opened for
// writing (a directory in its place) is not resumed: the resume is refused naming the
// file, and the record says failed with that error rather than "running" with nobody
// driving it. Control: with the file back, the same resume runs and appends its leg.
func TestEventsUnwritableFailsTheResume(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	script := filepath.Join(root, "script.toml")
	write(t, script, modelScript("read-x-then-nothing.toml"))
	e := start(t, scriptedConfig(script))
	write(t, filepath.Join(e.levHome, "agents", "one.toml"), "name = \"one\"\nversion = \"1\"\n[stages.s]\nprompt = \"p\"\ntools = [\"read_file\"]\n")
	ctx := context.Background()
	rec, err := e.client.Spawn(ctx, runner.Spec{Agent: "one", Workdir: e.wd})
	if err != nil {
		t.Fatal(err)
	}
	rec, _ = e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
	if rec.Status != runner.StatusFailed {
		t.Fatalf("status %s", rec.Status)
	}
	evFile := filepath.Join(e.levHome, "runs", rec.ID, events.FileName)
	saved, _ := os.ReadFile(evFile)
	os.Remove(evFile)
	os.Mkdir(evFile, 0o700)
	if _, err := e.client.Resume(ctx, rec.ID, false); err == nil || !strings.Contains(err.Error(), events.FileName) {
		t.Fatalf("resume with events.jsonl a directory: %v", err)
	}
	got, _ := e.client.Get(ctx, rec.ID)
	if got.Status != runner.StatusFailed || !strings.Contains(got.Error, events.FileName) {
		t.Fatalf("record after the refused resume: %s %q", got.Status, got.Error)
	}
	// Control.
	os.Remove(evFile)
	os.WriteFile(evFile, saved, 0o600)
	before := readLastID(t, evFile)
	res, err := e.client.Resume(ctx, rec.ID, false)
	if err != nil {
		t.Fatalf("control resume: %v", err)
	}
	if before < 2 || res.FirstEvent != before+1 {
		t.Fatalf("control: the resumed leg starts at %d, the file ended at %d", res.FirstEvent, before)
	}
	e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
}

// modelScript is a scripted model's rules from testdata/NAME (the provider's TOML script
// format). Read when a test asks, never at init: some test binaries re-run themselves as
// helpers from another directory.
func modelScript(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return string(b)
}
