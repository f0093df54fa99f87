package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/events"
)

// jailEnv is the environment lever gives the lev container (contract: LEV_HOME,
// LEV_CONFIG, LEV_AGENTS_DIR, LEV_TOKEN_FILE, LEV_LISTEN=unix:..., the provider's
// LEV_PROVIDER*), laid out in a temp dir: /run/lever (read-only settings: an empty
// config.toml, agents/, token) and /var/lib/lev (lev's home).
type jailEnv struct {
	root, runLever, levHome, sock, wd, script string
	env                                       []string
}

const jailToken = "jail-token-0123456789abcdef0123"

func newJailEnv(t *testing.T) *jailEnv {
	t.Helper()
	// A short root: unix socket paths are limited to 108 bytes.
	root, err := os.MkdirTemp("/tmp", "levj")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	j := &jailEnv{root: root, runLever: filepath.Join(root, "run-lever"), levHome: filepath.Join(root, "var-lib-lev"),
		wd: filepath.Join(root, "tree"), script: filepath.Join(root, "script.toml")}
	j.sock = filepath.Join(j.levHome, "api.sock")
	os.MkdirAll(j.wd, 0o755)
	os.MkdirAll(j.levHome, 0o700)
	mustWrite(t, filepath.Join(j.runLever, "config.toml"), "")
	os.MkdirAll(filepath.Join(j.runLever, "agents"), 0o755)
	if err := os.WriteFile(filepath.Join(j.runLever, "token"), []byte(jailToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	j.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root,
		"LEV_HOME=" + j.levHome, "LEV_CONFIG=" + filepath.Join(j.runLever, "config.toml"),
		"LEV_AGENTS_DIR=" + filepath.Join(j.runLever, "agents"), "LEV_TOKEN_FILE=" + filepath.Join(j.runLever, "token"),
		"LEV_LISTEN=unix:" + j.sock, "LEV_PROVIDER=scripted", "LEV_PROVIDER_SCRIPT=" + j.script}
	return j
}

// serve starts `lev serve` with env and returns it once its API answers.
func serveWith(t *testing.T, bin string, env []string, listen string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	var logb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); <-exited })
	c, err := daemon.NewClient(listen, jailToken)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if c.Health(context.Background()) == nil {
			return cmd
		}
		select {
		case <-exited:
			t.Fatalf("lev serve exited: %s", logb.String())
		case <-time.After(50 * time.Millisecond):
		}
		if i > 200 {
			t.Fatalf("lev serve did not answer on %s: %s", listen, logb.String())
		}
	}
}

// tcpListeners returns how many of pid's sockets are listening TCP sockets.
func tcpListeners(t *testing.T, pid int) int {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "0A" && inodes[fs[9]] { // 0A: LISTEN
				n++
			}
		}
	}
	return n
}

const hello = `name = "hello"
version = "1"
[stages.s]
prompt = "write and read back"
tools = ["write_file", "read_file", "submit_output"]
`

// TestBinaryNoSetupInTheJailEnv runs the built lev with exactly the environment lever
// gives its container and nothing else set up: lev serve listens on the unix socket only
// (mode 0600, no TCP port: a control daemon given a TCP address shows the check sees
// one), and lev ps, validate, run (live lines, then --json), logs, result work; an
// unknown run id is one line naming it, exit 2; the events endpoint refuses a client
// without the token over the socket (control: with it).
func TestBinaryNoSetupInTheJailEnv(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	j := newJailEnv(t)
	mustWrite(t, j.script, modelScript("hello-script.toml"))
	mustWrite(t, filepath.Join(j.runLever, "agents", "hello.toml"), hello)
	srv := serveWith(t, bin, j.env, "unix:"+j.sock)

	st, err := os.Lstat(j.sock)
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v, want a socket of mode 0600", j.sock, st.Mode(), err)
	}
	if n := tcpListeners(t, srv.Process.Pid); n != 0 {
		t.Fatalf("lev serve with LEV_LISTEN=unix: has %d TCP listeners", n)
	}
	// Control: the same check finds the port of a daemon told to listen on TCP.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	ctlHome := filepath.Join(j.root, "ctl-home")
	ctlEnv := append(append([]string(nil), j.env...), "LEV_LISTEN="+addr, "LEV_HOME="+ctlHome)
	ctl := serveWith(t, bin, ctlEnv, addr)
	if n := tcpListeners(t, ctl.Process.Pid); n != 1 {
		t.Fatalf("control: a TCP daemon shows %d TCP listeners, want 1 (the check is blind)", n)
	}

	out, errs, code := runLevIn(t, bin, j.wd, j.env, "ps")
	if code != 0 || !strings.HasPrefix(out, "RUN") {
		t.Fatalf("lev ps: %d %q %q", code, out, errs)
	}
	out, errs, code = runLevIn(t, bin, j.wd, j.env, "validate", "hello")
	if code != 0 || !strings.Contains(out, "is valid") {
		t.Fatalf("lev validate: %d %q %q", code, out, errs)
	}

	// lev run: readable lines on stderr in order, the result on stdout.
	t0 := time.Now()
	out, errs, code = runLevIn(t, bin, j.wd, j.env, "run", "hello")
	t.Logf("lev run of a 3-turn scripted run over the unix socket: %s, process start to exit", time.Since(t0))
	if code != 0 || out != "hello from the jail\n" {
		t.Fatalf("lev run: %d stdout %q stderr %q", code, out, errs)
	}
	want := []string{"#1 run r-", "#2 stage 1:s: start", "tool write_file", ": allowed", "tool write_file: ok", "tool read_file", "tool submit_output", "stage 1:s: completed", "result:", "run completed"}
	pos := 0
	for _, w := range want {
		i := strings.Index(errs[pos:], w)
		if i < 0 {
			t.Fatalf("lev run stderr lacks %q after position %d:\n%s", w, pos, errs)
		}
		pos += i + len(w)
	}
	id := regexpRunID(t, errs)

	// --json: every event a JSON line on stdout, ids 1..n, ending in run_end.
	out, errs, code = runLevIn(t, bin, j.wd, j.env, "run", "hello", "--json")
	if code != 0 {
		t.Fatalf("lev run --json: %d %s", code, errs)
	}
	var evs []events.Event
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev events.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("lev run --json: line %q: %v", l, err)
		}
		evs = append(evs, ev)
	}
	if len(evs) < 5 || evs[0].Type != events.RunStart || evs[len(evs)-1].Type != events.RunEnd || evs[len(evs)-2].Type != events.Result {
		t.Fatalf("lev run --json events: %+v", evs)
	}
	for i, ev := range evs {
		if ev.ID != int64(i+1) {
			t.Fatalf("lev run --json: event %d has id %d", i, ev.ID)
		}
	}

	// logs, result, ps --json of the first run.
	out, _, code = runLevIn(t, bin, j.wd, j.env, "logs", id)
	if code != 0 || !strings.Contains(out, "tool read_file") || !strings.Contains(out, "run completed") {
		t.Fatalf("lev logs: %d %q", code, out)
	}
	out, _, code = runLevIn(t, bin, j.wd, j.env, "logs", id, "--json", "--follow")
	if code != 0 || strings.Count(out, "\n") != len(evs) || !strings.Contains(out, `"type":"run_end"`) {
		t.Fatalf("lev logs --json --follow: %d %q", code, out)
	}
	out, _, code = runLevIn(t, bin, j.wd, j.env, "result", id)
	if code != 0 || out != "hello from the jail\n" {
		t.Fatalf("lev result: %d %q", code, out)
	}
	out, _, code = runLevIn(t, bin, j.wd, j.env, "result", id, "--json")
	var res daemon.Result
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Status != "completed" {
		t.Fatalf("lev result --json: %d %q", code, out)
	}
	out, _, code = runLevIn(t, bin, j.wd, j.env, "ps", "--json")
	var rows []psRow
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 || rows[0].Status != "completed" {
		t.Fatalf("lev ps --json: %d %q", code, out)
	}

	// A blueprint in the tree, not in the agents directory: found, validated and run as
	// the tree's (somebody else's).
	mustWrite(t, filepath.Join(j.wd, ".lev", "agents", "mine.toml"), strings.Replace(hello, `name = "hello"`, `name = "mine"`, 1))
	out, errs, code = runLevIn(t, bin, j.wd, j.env, "validate", "mine")
	if code != 0 || !strings.Contains(out, "from the run's tree") {
		t.Fatalf("lev validate of a tree blueprint: %d %q %q", code, out, errs)
	}
	out, errs, code = runLevIn(t, bin, j.wd, j.env, "run", "mine")
	if code != 0 || out != "hello from the jail\n" {
		t.Fatalf("lev run of a tree blueprint: %d %q %q", code, out, errs)
	}
	treeID := regexpRunID(t, errs)
	if b, _ := os.ReadFile(filepath.Join(j.levHome, "runs", treeID, "run.json")); !strings.Contains(string(b), `"origin": "tree"`) && !strings.Contains(string(b), `"origin":"tree"`) {
		t.Fatalf("tree run's record lacks origin tree: %.400s", b)
	}

	// Unknown run ids: one line naming the id, exit 2, for every command that takes one.
	for _, args := range [][]string{{"logs", "r-20260101-000000-abcdef"}, {"logs", "nope", "--follow"}, {"result", "r-20260101-000000-abcdef"}, {"resume", "r-20260101-000000-abcdef"}, {"result", "../../etc"}} {
		bad := args[1]
		out, errs, code := runLevIn(t, bin, j.wd, j.env, args...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, bad) {
			t.Errorf("lev %v: exit %d stdout %q stderr %q, want one line naming %s and exit 2", args, code, out, errs, bad)
		}
	}
	// An unknown agent: exit 2, naming it and where it was looked for.
	_, errs, code = runLevIn(t, bin, j.wd, j.env, "run", "nosuch")
	if code != 2 || !strings.Contains(errs, "nosuch") || !strings.Contains(errs, ".lev/agents/nosuch.toml") {
		t.Errorf("lev run nosuch: %d %q", code, errs)
	}

	// The events endpoint over the socket: 401 without the token, 200 with it.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", j.sock)
	}}}
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong-wrong-wrong-wrong", 401}, {"Bearer " + jailToken, 200}} {
		req, _ := http.NewRequest("GET", "http://lev/api/agents/"+id+"/events", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := new(bytes.Buffer)
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || (c.want == 401) == strings.Contains(body.String(), "run_start") {
			t.Fatalf("events with %q: %d %.200s", c.auth, resp.StatusCode, body.String())
		}
	}

	// No token file: the client says which file, exit 2.
	noTok := append(append([]string(nil), j.env...), "LEV_TOKEN_FILE="+filepath.Join(j.root, "missing-token"))
	_, errs, code = runLevIn(t, bin, j.wd, noTok, "ps")
	if code != 2 || !strings.Contains(errs, "missing-token") {
		t.Fatalf("lev ps without its token file: %d %q", code, errs)
	}
	// A relative socket path is refused, naming it.
	rel := append(append([]string(nil), j.env...), "LEV_LISTEN=unix:rel.sock")
	_, errs, code = runLevIn(t, bin, j.wd, rel, "ps")
	if code != 2 || !strings.Contains(errs, "unix:rel.sock") {
		t.Fatalf("lev ps with LEV_LISTEN=unix:rel.sock: %d %q", code, errs)
	}
}

func regexpRunID(t *testing.T, s string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, "r-") && len(f) == len("r-20260101-000000-abcdef") {
				return f
			}
		}
	}
	t.Fatalf("no run id in %q", s)
	return ""
}

var _ = strconv.Itoa

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
