//go:build e2e

package bringup_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/creack/pty"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/testutil"
	"github.com/lever-jail/lever/internal/testutil/browser"
)

// heldModel is the stand-in model upstream for the dashboard test: its first answer (a
// shell call, which asks permission) waits until the test releases it, so the run page
// is open before the run's next events are written; then it submits the output.
type heldModel struct {
	release chan struct{}
	output  string
}

func (m *heldModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	tool, args := "shell", `{"command":"echo dashboard-shell-ran"}`
	if bytes.Contains(body, []byte(`"role":"tool"`)) {
		tool, args = "submit_output", fmt.Sprintf(`{"output":%q}`, m.output)
	} else {
		select {
		case <-m.release:
		case <-r.Context().Done():
			return
		}
	}
	a, _ := json.Marshal(args)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":"stand-in","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_%s","type":"function","function":{"name":%q,"arguments":%s}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`, tool, tool, a)
}

// TestDashboardNetns is lever dashboard against a real jail on the netns substrate:
// `lever dashboard` (the command, its printed URL) in headless Chromium while `lever run`
// runs an agent on a terminal. The run page is open before the model answers: each
// event written after that appears on it within 1 s of its own timestamp. The shell
// call's permission prompt is then pending on the prompts page and at the terminal;
// the control: a POST to the answer endpoint from the page without the CSRF token is
// refused and the prompt stays pending, the shell not run. Then the page's own "once"
// button answers it through lev answer: the terminal withdraws its prompt, the shell
// runs, the run completes with the model's output, and the run page shows the answer.
func TestDashboardNetns(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	b := browser.New(t) // skips before any jail is made when there is no Chromium
	dir, proj, sfx := netnsProject(t, "lvdb")
	t.Setenv(netns.RunUserEnv, "lever-db")
	if code, out, errs := leverIO("init", proj); code != 0 {
		t.Fatalf("lever init: exit %d\n%s%s", code, out, errs)
	}
	cfgPath := filepath.Join(proj, "lever.yaml")
	yml, _ := os.ReadFile(cfgPath)
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte("sk-lvdb-"+sfx+"-"+sfx+sfx+"\n"), 0o600)
	model := &heldModel{release: make(chan struct{}), output: "dashboard done " + sfx}
	srv := httptest.NewServer(model)
	defer srv.Close()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(model.release) }) }
	defer release()
	jailPort, adminPort := freePort(t), freePort(t)
	settings := filepath.Join(dir, "lev-settings")
	os.MkdirAll(filepath.Join(settings, "agents"), 0o755)
	os.WriteFile(filepath.Join(settings, "config.toml"), []byte("[provider]\nmodel = \"stand-in\"\n"), 0o644)
	os.WriteFile(filepath.Join(settings, "agents", "dash.toml"), []byte("name = \"dash\"\nversion = \"1\"\n[stages.s]\nprompt = \"Say hello.\"\ntools = [\"shell\", \"submit_output\"]\n"), 0o644)
	edited := editInitYAML(t, string(yml), []yamlEdit{
		{`(?m)^name: .*$`, "name: d" + sfx},
		{`(?m)^backend: .*$`, "backend: netns"},
		{`(?m)^  allow_ports: .*$`, fmt.Sprintf("  allow_ports: [%d]", jailPort)},
		{`(?m)^  api_key_file: .*$`, "  api_key_file: " + keyFile},
		{`(?m)^  llm_upstream: .*$`, "  llm_upstream: " + srv.URL + "/v1"},
		{`(?m)^  jail_port: .*$`, fmt.Sprintf("  jail_port: %d", jailPort)},
		{`(?m)^  admin_port: .*$`, fmt.Sprintf("  admin_port: %d", adminPort)},
		{`(?m)^lev:$`, "lev:\n  config: " + filepath.Join(settings, "config.toml") + "\n  agents: " + filepath.Join(settings, "agents")},
	})
	os.WriteFile(cfgPath, []byte(edited), 0o644)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("the edited lever.yaml: %v\n%s", err, edited)
	}
	be, err := backend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lever(t, "destroy", "-c", cfgPath)
		bringup.TeardownInPlace(context.Background(), be)
	})
	if out, code := lever(t, "up", "-c", cfgPath); code != 0 {
		t.Fatalf("lever up: exit %d\n%s", code, out)
	}

	// lever dashboard, the command, as a user starts it.
	dash := exec.Command(os.Args[0], "dashboard", "--no-open", "-c", cfgPath)
	dash.Env = append(os.Environ(), asLever+"=1")
	dout, err := dash.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var dashErr bytes.Buffer
	dash.Stderr = &dashErr
	if err := dash.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dash.Process.Signal(syscall.SIGINT); dash.Wait() })
	line, err := bufio.NewReader(dout).ReadString('\n')
	go io.Copy(io.Discard, dout)
	i := strings.Index(line, "http://127.0.0.1:")
	if err != nil || i < 0 {
		t.Fatalf("lever dashboard printed %q (%v); stderr %s", line, err, dashErr.String())
	}
	url := strings.TrimSpace(line[i:])
	base := url[:strings.Index(url, "/?token=")]

	// lever run on a terminal: interactive, so the shell's ask waits for an answer.
	run := exec.Command(os.Args[0], "run", "-c", cfgPath, "dash")
	run.Env = append(os.Environ(), asLever+"=1")
	f, err := pty.StartWithSize(run, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var termMu sync.Mutex
	var term bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			termMu.Lock()
			term.Write(buf[:n])
			termMu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	terminal := func() string { termMu.Lock(); defer termMu.Unlock(); return term.String() }
	var id string
	for deadline := time.Now().Add(3 * time.Minute); id == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if m := regexp.MustCompile(`run (r-[0-9]{8}-[0-9]{6}-[0-9a-f]+)`).FindStringSubmatch(terminal()); m != nil {
			id = m[1]
		}
	}
	if id == "" {
		t.Fatalf("lever run printed no run id:\n%s", terminal())
	}

	b.Do(t, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("nav")))
	b.Do(t, chromedp.Navigate(base+"/runs"))
	b.WaitText(t, "#runs", id, 30*time.Second)
	b.Do(t, chromedp.Navigate(base+"/runs/manager/"+id))
	b.WaitText(t, "#state", "live", 30*time.Second)
	b.WaitText(t, "#events", "run_start", 30*time.Second)
	// Each row's arrival time, against the event's own (the jail's clock is the host's).
	browser.Eval[bool](t, b, `(function(){window.__arrived=[];new MutationObserver(function(ms){for(const m of ms){for(const n of m.addedNodes){if(n.cells){window.__arrived.push([n.cells[1].textContent,n.cells[2].textContent,Date.now()]);}}}}).observe(document.querySelector("#events tbody"),{childList:true});return true})()`)
	release()
	b.WaitText(t, "#events", "ask", 60*time.Second)
	var rows [][]any
	raw := browser.Eval[string](t, b, `JSON.stringify(window.__arrived)`)
	json.Unmarshal([]byte(raw), &rows)
	var worst time.Duration
	var seen []string
	for _, r := range rows {
		if len(r) != 3 {
			continue
		}
		ts, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(r[0]))
		at, _ := r[2].(float64)
		lag := time.UnixMilli(int64(at)).Sub(ts)
		worst = max(worst, lag)
		seen = append(seen, fmt.Sprintf("%s %s", r[1], lag.Round(time.Millisecond)))
	}
	t.Logf("events on the open run page, each after its timestamp: %s", strings.Join(seen, ", "))
	if len(rows) == 0 || worst > time.Second {
		t.Errorf("live events: %d rows arrived, the slowest %s after it was written; want each within 1 s", len(rows), worst)
	}

	// The pending prompt, on the page and at the terminal.
	b.Do(t, chromedp.Navigate(base+"/prompts"))
	b.WaitText(t, "#prompts", "shell", 30*time.Second)
	if !strings.Contains(terminal(), "[y]es / [N]o? ") {
		t.Fatalf("no permission prompt at the terminal:\n%s", terminal())
	}
	// The control: an answer POST without the session's CSRF token changes nothing.
	status := browser.Eval[float64](t, b, fmt.Sprintf(`(function(){const x=new XMLHttpRequest();x.open("POST","/prompts/answer",false);x.setRequestHeader("Content-Type","application/x-www-form-urlencoded");x.send("agent=manager&run=%s&question=q1&answer=once");return x.status})()`, id))
	if status != 403 {
		t.Errorf("an answer without the CSRF token: %v, want 403", status)
	}
	time.Sleep(2 * time.Second)
	// Chromium logs the refused POST's 403 as a console error: that one is the control's.
	for _, p := range b.TakeProblems() {
		if !strings.Contains(p, "status of 403 (Forbidden)") {
			t.Errorf("the page reported: %s", p)
		}
	}
	b.Do(t, chromedp.Navigate(base+"/prompts"))
	b.WaitText(t, "#prompts", "shell", 10*time.Second)
	if strings.Contains(terminal(), "has its answer") {
		t.Fatalf("the refused POST answered the prompt:\n%s", terminal())
	}
	// The page's own button.
	b.Do(t, chromedp.Click(chromedp.CSS(`#prompts button[value="once"]`)))
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("lever run: %v\n%s", err, terminal())
		}
	case <-time.After(2 * time.Minute):
		run.Process.Kill()
		t.Fatalf("lever run did not end after the answer:\n%s", terminal())
	}
	out := terminal()
	t.Logf("lever run dash on a pty:\n%s", out)
	if !strings.Contains(out, "(q1 has its answer: this prompt is withdrawn)") || !strings.Contains(out, model.output) {
		t.Errorf("the terminal does not show the withdrawn prompt and the output %q", model.output)
	}
	if !strings.Contains(out, "tool shell: ok") {
		t.Errorf("the shell call did not run after the answer")
	}
	b.Do(t, chromedp.Navigate(base+"/prompts"))
	b.WaitText(t, "#prompts", "No prompt is waiting", 30*time.Second)
	b.Do(t, chromedp.Navigate(base+"/runs/manager/"+id))
	b.WaitText(t, "#events", "answer: once", 30*time.Second)
	b.WaitText(t, "#events", model.output, 30*time.Second)
	b.Clean(t)
}
