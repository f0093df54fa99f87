package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// levDaemon is a real `lev serve` process.
type levDaemon struct {
	cmd            *exec.Cmd
	client         *daemon.Client
	levHome, root  string
	wd, scriptFile string
	exited         chan struct{}
	log            *strings.Builder
}

const daemonToken = "lvtsbx-daemon-token-0123456789"

func startDaemon(t *testing.T, bin, extraConfig string) *levDaemon {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	d := &levDaemon{root: root, levHome: filepath.Join(root, "lev"), wd: filepath.Join(root, "wd"), scriptFile: filepath.Join(root, "script.toml"),
		exited: make(chan struct{}), log: &strings.Builder{}}
	os.MkdirAll(d.wd, 0o755)
	addr := freeAddr(t)
	mustWrite(t, filepath.Join(d.levHome, "config.toml"), "[daemon]\nlisten = \""+addr+"\"\n[provider]\nkind = \"scripted\"\nscript = \""+d.scriptFile+"\"\n"+extraConfig)
	d.cmd = exec.Command(bin, "serve")
	d.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "LEV_HOME=" + d.levHome, "LEV_TOKEN=" + daemonToken}
	pr, pw, _ := os.Pipe()
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	logDone := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.log.WriteString(sc.Text() + "\n")
		}
		close(logDone)
	}()
	go func() { d.cmd.Wait(); <-logDone; close(d.exited) }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.exited
	})
	d.client = &daemon.Client{Base: "http://" + addr, Token: daemonToken}
	// Polled for up to 30 s: a binary's start on a loaded machine can take seconds.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if d.client.Health(context.Background()) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not come up:\n%s", d.log.String())
		}
		select {
		case <-d.exited:
			t.Fatalf("daemon exited before it answered:\n%s", d.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return d
}

type callLine struct {
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args"`
	Refusal *struct {
		Step, Code, Message string
	} `json:"refusal"`
	IsError    bool    `json:"is_error"`
	Result     string  `json:"result"`
	DurationMS float64 `json:"duration_ms"`
}

func readCalls(t *testing.T, runDir string) []callLine {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runDir, "stages", "0", "tool_calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []callLine
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var c callLine
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// TestBinaryFileToolsRefuseNonRegularFiles drives the real lev daemon: a scripted agent
// aims write_file, read_file, edit_file and list_dir at a FIFO, a unix socket, a device
// node and symlinks to them (and to /dev/zero) inside its workdir. Every call is refused
// promptly with the reason (before the fix, write_file on the FIFO blocked the run
// forever); the same tools on a regular file and a directory work (positive controls).
// The run's taint_audit.json shows the gate the binary wires ran (docs/lev.md, "Wiring").
func TestBinaryFileToolsRefuseNonRegularFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	d := startDaemon(t, bin, "")
	wd := d.wd
	if err := syscall.Mkfifo(filepath.Join(wd, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock, err := net.Listen("unix", filepath.Join(wd, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	haveDev := syscall.Mknod(filepath.Join(wd, "zerodev"), syscall.S_IFCHR|0o644, 1<<8|5) == nil
	os.Symlink("fifo", filepath.Join(wd, "fifolink"))
	os.Symlink("/dev/zero", filepath.Join(wd, "devzero"))
	os.WriteFile(filepath.Join(wd, "regular.txt"), []byte("hello regular"), 0o644)
	os.MkdirAll(filepath.Join(wd, "dir"), 0o755)

	type probe struct {
		tool, args string
		code       string // refusal code wanted; "" = must succeed
	}
	var probes []probe
	targets := map[string]string{"fifo": "not-a-regular-file", "sock": "not-a-regular-file", "fifolink": "not-a-regular-file", "devzero": "outside-workdir"}
	if haveDev {
		targets["zerodev"] = "not-a-regular-file"
	}
	for _, p := range []string{"fifo", "sock", "fifolink", "devzero", "zerodev"} {
		code, ok := targets[p]
		if !ok {
			continue
		}
		wcode := code
		if code == "outside-workdir" {
			wcode = "write-outside-workdir" // a symlink out of the workdir: the fence refuses first
		}
		probes = append(probes,
			probe{"write_file", `{"path": "` + p + `", "content": "x"}`, wcode},
			probe{"read_file", `{"path": "` + p + `"}`, code},
			probe{"edit_file", `{"path": "` + p + `", "old_string": "a", "new_string": "b"}`, wcode},
		)
		if p != "devzero" {
			probes = append(probes, probe{"list_dir", `{"path": "` + p + `"}`, code})
		}
	}
	probes = append(probes,
		probe{"write_file", `{"path": "new.txt", "content": "written"}`, ""},
		probe{"read_file", `{"path": "regular.txt"}`, ""},
		probe{"edit_file", `{"path": "regular.txt", "old_string": "hello", "new_string": "edited"}`, ""},
		probe{"list_dir", `{"path": "dir"}`, ""},
	)
	var sc strings.Builder
	for i, p := range probes {
		fmt.Fprintf(&sc, "[[rule]]\nturn = %d\n[[rule.call]]\ntool = %q\nargs = '%s'\n\n", i+1, p.tool, p.args)
	}
	fmt.Fprintf(&sc, "[[rule]]\nturn = %d\ntext = \"done\"\n", len(probes)+1)
	mustWrite(t, d.scriptFile, sc.String())
	mustWrite(t, filepath.Join(d.levHome, "agents", "files.toml"), fmt.Sprintf("name = \"files\"\nversion = \"1\"\n[stages.s]\nmax_turns = %d\ntools = [\"read_file\", \"write_file\", \"edit_file\", \"list_dir\"]\n", len(probes)+2))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	rec, err := d.client.Spawn(ctx, runner.Spec{Agent: "files", Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}
	rec, err = d.client.Wait(ctx, rec.ID, 20*time.Millisecond)
	if err != nil {
		t.Fatalf("the run did not finish (a file tool hung?): %v\n%s", err, d.log.String())
	}
	took := time.Since(start)
	if rec.Status != runner.StatusCompleted {
		t.Fatalf("status %s: %s", rec.Status, rec.Error)
	}
	runDir := filepath.Join(d.levHome, "runs", rec.ID)
	lines := readCalls(t, runDir)
	if len(lines) != len(probes) {
		t.Fatalf("%d calls recorded, want %d", len(lines), len(probes))
	}
	for i, p := range probes {
		l := lines[i]
		if p.code == "" {
			if l.Refusal != nil || l.IsError {
				t.Errorf("control %s %s: %+v %s", p.tool, p.args, l.Refusal, l.Result)
			}
			continue
		}
		if l.Refusal == nil || l.Refusal.Code != p.code {
			t.Errorf("%s %s: want refusal %s, got %+v %s", p.tool, p.args, p.code, l.Refusal, l.Result)
		} else if p.code == "not-a-regular-file" && !strings.Contains(l.Refusal.Message, "file tools act on regular files and directories only") {
			t.Errorf("%s: message %q", p.tool, l.Refusal.Message)
		}
		if l.DurationMS > 2000 {
			t.Errorf("%s %s took %.0f ms", p.tool, p.args, l.DurationMS)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "new.txt")); string(b) != "written" {
		t.Errorf("control write: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "regular.txt")); string(b) != "edited regular" {
		t.Errorf("control edit: %q", b)
	}
	t.Logf("%d probes in %s (dev node: %v)", len(probes), took, haveDev)
	// The gate the binary wires ran: the plain final answer went through it.
	au, err := taint.ReadAudit(taint.AuditPath(runDir, 0))
	if err != nil || len(au) == 0 {
		t.Fatalf("no taint audit in the run: %v (is the gate wired?)", err)
	}
}

// TestBinaryDaemonStopsOnSIGTERMDuringAStuckCall: a run's shell call is stuck (a process
// that left the process group and holds the output pipe open, so killing the group does
// not end the call); SIGTERM to the
// daemon still ends it within a bound. Positive control: the call really is running when
// the signal arrives (its marker file exists, the run is still running).
func TestBinaryDaemonStopsOnSIGTERMDuringAStuckCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	d := startDaemon(t, bin, "[tool_permissions]\nshell = \"allow\"\n")
	mustWrite(t, d.scriptFile, modelScript("stuck-call-script.toml"))
	mustWrite(t, filepath.Join(d.levHome, "agents", "stuck.toml"), "name = \"stuck\"\nversion = \"1\"\n[stages.s]\ntools = [\"shell\"]\n")
	ctx := context.Background()
	rec, err := d.client.Spawn(ctx, runner.Spec{Agent: "stuck", Workdir: d.wd})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(d.wd, "started")); err == nil {
			break
		}
		if i > 200 {
			t.Fatalf("the shell call never started:\n%s", d.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if got, err := d.client.Get(ctx, rec.ID); err != nil || got.Status != runner.StatusRunning {
		t.Fatalf("control: the run is not running when signalled: %+v %v", got, err)
	}
	start := time.Now()
	d.cmd.Process.Signal(syscall.SIGTERM)
	const bound = 20 * time.Second
	select {
	case <-d.exited:
	case <-time.After(bound):
		t.Fatalf("the daemon ignored SIGTERM for %s:\n%s", bound, d.log.String())
	}
	t.Logf("daemon exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	// The stray the test made: its own pid file names it.
	if b, err := os.ReadFile(filepath.Join(d.wd, "stuck.pid")); err == nil {
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestBinaryRejectsUnknownToolPermission: through the real binary, a misspelt
// [tool_permissions] key fails `lev validate` (blueprint) and `lev serve` (config.toml)
// with the key and its line; the correct spelling passes both (positive control).
func TestBinaryRejectsUnknownToolPermission(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	for _, c := range []struct {
		key  string
		want string // "" = accepted
	}{
		{"shel", `key "tool_permissions.shel": unknown tool "shel" (did you mean "shell"?)`},
		{"Shell", `key "tool_permissions.Shell": unknown tool "Shell" (did you mean "shell"?)`},
		{"shell", ""},
	} {
		root, _ := filepath.EvalSymlinks(t.TempDir())
		levHome := filepath.Join(root, "lev")
		env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "LEV_HOME=" + levHome, "LEV_TOKEN=" + daemonToken}
		bp := filepath.Join(levHome, "agents", "a.toml")
		mustWrite(t, bp, "name = \"a\"\nversion = \"1\"\n[tool_permissions]\n"+c.key+" = \"deny\"\n[stages.s]\ntools = [\"shell\"]\n")
		stdout, stderr, code := runLev(t, bin, env, "validate", "a")
		if c.want == "" {
			if code != 0 {
				t.Errorf("validate %s: %d %s", c.key, code, stdout+stderr)
			}
		} else if code != 1 || !strings.Contains(stdout, "✗ Blueprint 'a' is invalid: "+bp+`:4: `+c.want) {
			t.Errorf("validate %s: %d %q", c.key, code, stdout)
		}
		cfg := filepath.Join(levHome, "config.toml")
		mustWrite(t, cfg, "[daemon]\nlisten = \"127.0.0.1:1\"\n[tool_permissions]\n"+c.key+" = \"deny\"\n")
		if c.want == "" {
			continue // a valid config would start a daemon; validate covered acceptance
		}
		_, stderr, code = runLev(t, bin, env, "serve")
		if code != 2 || !strings.Contains(stderr, cfg+`:4: `+c.want) {
			t.Errorf("serve with %s: %d %q", c.key, code, stderr)
		}
	}
}

// TestBinaryArgumentSpellingsCannotSplitGateFromTool is the argument-spelling attack
// through the real daemon binary (its own gate and executor): after a Private read, an
// http_post whose url is ALLOWED for an exact-key reader and OTHER for encoding/json.
// The policy allows Private data to 127.0.0.1 only; OTHER (127.0.0.2) must receive
// nothing. Controls: the plain call to OTHER is blocked by the gate, the plain call to
// ALLOWED reaches it.
func TestBinaryArgumentSpellingsCannotSplitGateFromTool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	d := startDaemon(t, bin, "[tool_permissions]\nhttp_post = \"allow\"\n[agent_read_paths.ex]\nallow = [\"~/secret\"]\n")
	mustWrite(t, filepath.Join(d.root, "secret", "key.txt"), "SECRET-lvtsbx-bin")
	mustWrite(t, filepath.Join(d.levHome, "policy.toml"), "[[allow]]\ntool = \"http_post\"\ntarget = \"127.0.0.1\"\nmax_sensitivity = \"private\"\n")
	mustWrite(t, filepath.Join(d.levHome, "agents", "ex.toml"), "name = \"ex\"\nversion = \"1\"\n[read_paths]\nallow = [\"~/secret\"]\n[stages.s]\ntools = [\"read_file\", \"http_post\"]\n")
	hits := map[string]*atomic.Int32{}
	serve := func(ip string) string {
		ln, err := net.Listen("tcp", ip+":0")
		if err != nil {
			t.Skipf("listen %s: %v", ip, err)
		}
		n := new(atomic.Int32)
		hits[ip] = n
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1); w.Write([]byte("ok")) })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return "http://" + ln.Addr().String()
	}
	allowed, other := serve("127.0.0.1"), serve("127.0.0.2")
	for _, c := range []struct {
		name, args, step string // step: refusal step wanted, "" = ran
		allowedHits      int32
	}{
		{"url and URL", `{"url": "` + allowed + `/x", "URL": "` + other + `/x", "body": "{{last}}"}`, "offer", 0},
		{"url twice", `{"url": "` + allowed + `/x", "url": "` + other + `/x", "body": "{{last}}"}`, "offer", 0},
		{"escaped URL", `{"url": "` + allowed + `/x", "\u0055RL": "` + other + `/x", "body": "{{last}}"}`, "offer", 0},
		{"control: plain other", `{"url": "` + other + `/x", "body": "{{last}}"}`, "gate", 0},
		{"control: plain allowed", `{"url": "` + allowed + `/x", "body": "{{last}}"}`, "", 1},
	} {
		hits["127.0.0.1"].Store(0)
		hits["127.0.0.2"].Store(0)
		mustWrite(t, d.scriptFile, `[[rule]]
turn = 1
[[rule.call]]
tool = "read_file"
args = '{"path": "`+filepath.Join(d.root, "secret", "key.txt")+`"}'
[[rule]]
turn = 2
[[rule.call]]
tool = "http_post"
args = '`+c.args+`'
[[rule]]
turn = 3
text = "done"
[[rule]]
turn = 4
text = "done"
`)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		rec, err := d.client.Spawn(ctx, runner.Spec{Agent: "ex", Workdir: d.wd})
		if err == nil {
			rec, err = d.client.Wait(ctx, rec.ID, 20*time.Millisecond)
		}
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		lines := readCalls(t, filepath.Join(d.levHome, "runs", rec.ID))
		if len(lines) < 2 || lines[0].IsError || lines[1].Tool != "http_post" {
			t.Fatalf("%s: calls %+v", c.name, lines)
		}
		l := lines[1]
		switch {
		case c.step == "" && (l.Refusal != nil || l.IsError):
			t.Errorf("%s: refused %+v %s", c.name, l.Refusal, l.Result)
		case c.step != "" && (l.Refusal == nil || l.Refusal.Step != c.step):
			t.Errorf("%s: want a refusal at %s, got %+v", c.name, c.step, l.Refusal)
		}
		if hits["127.0.0.2"].Load() != 0 || hits["127.0.0.1"].Load() != c.allowedHits {
			t.Errorf("%s: other got %d, allowed got %d (want %d)", c.name, hits["127.0.0.2"].Load(), hits["127.0.0.1"].Load(), c.allowedHits)
		}
	}
}
