//go:build e2e

package bringup_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/testutil"
)

// dailyMakefile is the project's build the agent runs in its workbench: make, tar, gzip
// and sha256sum, nothing downloaded.
const dailyMakefile = "build:\n\tmkdir -p build\n\ttar -czf build/project.tar.gz src\n\tcd build && sha256sum project.tar.gz > SUMS\n"

// TestDailyLoopNetns is the daily loop of docs/daily.md on the netns substrate, through the
// host commands only: lever init in an empty project, lever up (closed egress, no
// registry: the workbench is built from this machine's own packages), lever run of a
// scripted agent whose tools use the workbench (git status and log of the project's
// repository, the project's build, a file written and read back) with its progress reaching the host while the run is held
// mid-way, lever ps/logs/result, the file in the host's tree; from the shell tool, lev's
// token, key, state and API and the broker all out of reach, and lever.yaml and the
// repository's .git read-only (each with its positive control); and on a pseudo-terminal, an ask answered yes and a taint-gate prompt answered
// deny, both in the record, the events and taint_audit.json.
func TestDailyLoopNetns(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	dir, proj, sfx := netnsProject(t, "lvtb")

	// 1. lever init in an empty project: a lever.yaml and a starter blueprint, loadable.
	code, stdout, errs := leverIO("init", proj)
	if code != 0 {
		t.Fatalf("lever init: exit %d\n%s%s", code, stdout, errs)
	}
	cfgPath := filepath.Join(proj, "lever.yaml")
	yml, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatalf("lever init wrote no lever.yaml: %v", err)
	}
	if _, err := os.Stat(filepath.Join(proj, ".lev", "agents", "starter.toml")); err != nil {
		t.Fatalf("lever init wrote no starter blueprint: %v", err)
	}
	if code, _, errs := leverIO("init", proj); code != 2 || !strings.Contains(errs, "lever.yaml") {
		t.Errorf("a second lever init: exit %d, want 2 naming the existing file: %s", code, errs)
	}

	// The jail's world: a scripted model behind the broker, the key on the host, the user's
	// lev settings outside the tree. Only what a user edits after init changes.
	key := "sk-lvtd-" + sfx + "-" + sfx + sfx
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	var model atomic.Pointer[testutil.StandIn]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { model.Load().ServeHTTP(w, r) }))
	defer srv.Close()
	settings := filepath.Join(dir, "lev-settings")
	os.MkdirAll(filepath.Join(settings, "agents"), 0o755)
	os.WriteFile(filepath.Join(settings, "config.toml"), []byte("[provider]\nmodel = \"stand-in\"\n\n[agent_read_paths.gate]\nallow = [\"/etc/passwd\"]\n"), 0o644)
	os.WriteFile(filepath.Join(settings, "agents", "task.toml"), []byte("name = \"task\"\nversion = \"1\"\n[stages.work]\ntools = [\"shell\", \"write_file\", \"read_file\", \"submit_output\"]\nmax_turns = 12\n"), 0o644)
	os.WriteFile(filepath.Join(settings, "agents", "gate.toml"), []byte("name = \"gate\"\nversion = \"1\"\n[read_paths]\nallow = [\"/etc/passwd\"]\n[stages.s]\ntools = [\"read_file\", \"shell\", \"submit_output\"]\n"), 0o644)
	jailPort, adminPort := freePort(t), freePort(t)
	edited := editInitYAML(t, string(yml), []yamlEdit{
		{`(?m)^name: .*$`, "name: d" + sfx},
		{`(?m)^backend: .*$`, "backend: netns"},
		{`(?m)^  allow_ports: .*$`, fmt.Sprintf("  allow_ports: [%d]", jailPort)},
		{`(?m)^workers: \[\]$`, "workers:\n  - name: w1\n    dir: src\n    llm_auth: api-key"},
		{`(?m)^  api_key_file: .*$`, "  api_key_file: " + keyFile},
		{`(?m)^  llm_upstream: .*$`, "  llm_upstream: " + srv.URL + "/v1"},
		{`(?m)^  jail_port: .*$`, fmt.Sprintf("  jail_port: %d", jailPort)},
		{`(?m)^  admin_port: .*$`, fmt.Sprintf("  admin_port: %d", adminPort)},
		{`(?m)^lev:$`, "lev:\n  config: " + filepath.Join(settings, "config.toml") + "\n  agents: " + filepath.Join(settings, "agents")},
	})
	os.WriteFile(cfgPath, []byte(edited), 0o644)
	os.MkdirAll(filepath.Join(proj, "src"), 0o777)
	os.Chmod(filepath.Join(proj, "src"), 0o777)
	os.WriteFile(filepath.Join(proj, "src", "main.c"), []byte("int main(void) { return 0; }\n"), 0o644)
	os.WriteFile(filepath.Join(proj, "Makefile"), []byte(dailyMakefile), 0o644)
	// The project is a git repository on the host before lever up: its .git is read-only
	// for the agents (git: read-only, the default), so nothing they write there runs at
	// the host's next git command. Their git status and log still work (step 3).
	for _, argv := range [][]string{{"init", "-q", "."}, {"add", "Makefile", "src"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start"}} {
		if out, err := exec.Command("git", append([]string{"-C", proj}, argv...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v on the host: %v\n%s", argv, err, out)
		}
	}
	gitConfigBefore, err := os.ReadFile(filepath.Join(proj, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	// lever.yaml and .git writable by anyone, so that only the read-only mounts stand
	// between the agent's shell (another uid here) and them: what refuses its writes
	// below is the mount (EROFS), not the files' modes.
	filepath.Walk(filepath.Join(proj, ".git"), func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			os.Chmod(p, fi.Mode().Perm()|0o666|map[bool]os.FileMode{true: 0o111}[fi.IsDir()])
		}
		return nil
	})
	os.Chmod(cfgPath, 0o666)
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

	// 2. lever up from nothing: closed egress, the workbench built here, no registry.
	out, code := lever(t, "up", "-c", cfgPath)
	t.Logf("lever up:\n%s", out)
	if code != 0 || !strings.Contains(out, "workbench") {
		t.Fatalf("up: exit %d", code)
	}
	hv4, _ := be.(interface {
		HostAddrs() (netip.Addr, netip.Addr)
	}).HostAddrs()
	uid := strings.TrimSpace(sh(t, "id", "-u", "lever"))
	agentDir := "/run/user/" + uid + "/lever/agents/manager/"
	token, _ := os.ReadFile(agentDir + "token")
	clientKey, _ := os.ReadFile(agentDir + "client.key")
	if len(bytes.TrimSpace(token)) < 16 || len(clientKey) < 100 {
		t.Fatalf("positive control: lev's token (%d bytes) and client key (%d bytes) are not where the lev container reads them", len(token), len(clientKey))
	}
	keyLine := ""
	for _, l := range strings.Split(string(clientKey), "\n") {
		if len(l) > 40 && !strings.HasPrefix(l, "-----") {
			keyLine = l // one line of the key's base64: its bytes must appear in no tool result
			break
		}
	}

	// 3. lever run of a scripted agent. The attack turn runs, from the shell tool, every
	// way at lev's secrets and endpoints this test knows of; each prints a tag line so the
	// test sees it ran.
	attack := strings.Join([]string{
		"echo T-token; cat /run/lever/token 2>&1",
		"echo T-key; cat /run/lever/client.key 2>&1",
		"echo T-runlever; ls -a /run/lever 2>&1",
		"echo T-home; ls -a /var/lib/lev 2>&1",
		"echo T-sock; ls -l /var/lib/lev/api.sock 2>&1",
		"echo T-levps; /lev ps 2>&1",
		"echo T-tcp; for p in 7447 7700 7701; do git ls-remote http://127.0.0.1:$p/x 2>&1 | tail -1; done",
		fmt.Sprintf("echo T-broker; GIT_SSL_NO_VERIFY=1 git ls-remote https://%s:%d/llm/ 2>&1 | tail -2", hv4, jailPort),
		// lever.yaml sits at the tree's root (lever init's layout) and lever trusts it on
		// the host: it is mounted read-only for the agents, so neither an edit, a rename,
		// a removal nor a second name reaches it; the file beside it is the control.
		"echo T-cfg; echo 'egress: open' >> /lever/lever.yaml 2>&1; mv /lever/lever.yaml /lever/moved.yaml 2>&1; rm -f /lever/lever.yaml 2>&1; ln /lever/lever.yaml /lever/hard.yaml 2>&1; echo ok > /lever/cfg-control.txt",
		// The repository's .git: a hook, a commondir pointing git at a config of the
		// agent's, a config change and a commit are all refused (read-only); git status
		// in step 1 read the same .git (the control).
		"echo T-git; echo evil > /lever/.git/hooks/pre-commit 2>&1; echo ../x > /lever/.git/commondir 2>&1; git -C /lever config core.fsmonitor evil 2>&1; git -C /lever commit --allow-empty -qm x 2>&1",
		"echo T-end",
	}, "; ")
	// The scratch space (issue 28 item 3): mktemp and a file in $HOME work on the read-only
	// root (/tmp is a tmpfs and HOME=/tmp), a write past the tmpfs's 256 MiB is refused
	// with ENOSPC, and the root beside it stays read-only (the control that the write
	// reached a filesystem that refuses).
	scratch := strings.Join([]string{
		"echo T-scratch",
		`f=$(mktemp) && echo tmp-ok > "$f" && cat "$f"`,
		`echo home-ok > "$HOME/probe" && cat "$HOME/probe"`,
		"dd if=/dev/zero of=/tmp/fill bs=1M count=300 2>&1 | grep -o 'No space left on device'",
		"rm -f /tmp/fill",
		"{ echo x > /etc/probe; } 2>&1 | grep -o 'Read-only file system'",
		"echo T-scratch-end",
	}, "; ")
	cfgBefore, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	release := make(chan struct{})
	task := &testutil.StandIn{
		Steps: []testutil.Step{
			{Tool: "shell", Args: map[string]string{"command": "git status --short && git log --oneline"}},
			{Tool: "shell", Args: map[string]string{"command": "make build && cat build/SUMS; " + scratch}},
			{Tool: "shell", Args: map[string]string{"command": attack}},
			{Tool: "write_file", Args: map[string]string{"path": "NOTES.md", "content": "built " + sfx + "\n"}},
			{Tool: "read_file", Args: map[string]string{"path": "NOTES.md"}},
			{Tool: "submit_output", Args: map[string]string{"output": "done " + sfx}},
		},
		Hold: func(n int) {
			if n == 2 { // the model's third turn waits until the host has shown the first two
				close(held)
				select {
				case <-release:
				case <-time.After(90 * time.Second):
				}
			}
		},
	}
	model.Store(task)
	cmd := exec.Command(os.Args[0], "run", "-c", cfgPath, "--allow", "shell", "--input", "build it", "task")
	cmd.Env = append(os.Environ(), asLever+"=1")
	var runOut bytes.Buffer
	cmd.Stdout = &runOut
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	var linesAt []time.Time
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			linesAt = append(linesAt, time.Now())
			mu.Unlock()
		}
	}()
	seen := func(substr string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, l := range lines {
			if strings.Contains(l, substr) {
				n++
			}
		}
		return n
	}
	select {
	case <-held:
	case <-time.After(120 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the model's third turn never came; host saw:\n%s", strings.Join(lines, "\n"))
	}
	// While the model is held, the host must already show both shell calls and their
	// results: progress is live, not printed at the end.
	deadline := time.Now().Add(30 * time.Second)
	for seen("tool shell: ") < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	liveAt := time.Now()
	if n := seen("tool shell: "); n < 2 {
		close(release)
		cmd.Wait()
		t.Fatalf("while the run was held the host showed %d shell results, want 2 (live progress):\n%s", n, strings.Join(lines, "\n"))
	}
	close(release)
	runErr := cmd.Wait()
	<-readDone
	t.Logf("lever run task: %v\nstdout: %s\nstderr:\n%s", runErr, runOut.String(), strings.Join(lines, "\n"))
	if runErr != nil || !strings.Contains(runOut.String(), "done "+sfx) {
		t.Fatalf("lever run task did not complete")
	}
	// Order: the tool calls as the host printed them.
	var order []string
	// Arguments past the event's 1 KiB cap (the attack's) print as a cut JSON string.
	toolLine := regexp.MustCompile(`#\d+ tool ([a-z_]+) [{"]`)
	for i, l := range lines {
		if m := toolLine.FindStringSubmatch(l); m != nil {
			order = append(order, m[1])
			if i < len(linesAt) && linesAt[i].After(liveAt) && len(order) <= 2 {
				t.Errorf("tool call line %q reached the host only after the hold", l)
			}
		}
	}
	if got := strings.Join(order, " "); got != "shell shell shell write_file read_file submit_output" {
		t.Errorf("tool calls on the host, in order: %s", got)
	}

	// What the model saw from each tool: git and the build ran in the workbench; the
	// attack reached every probe (its tags) and got none of lev's secrets.
	_, auths, results := task.Seen()
	for i, a := range auths {
		if a != "Bearer "+key {
			t.Errorf("model request %d carried %q, not the broker's key", i, a)
		}
	}
	if len(results) < 5 {
		t.Fatalf("the model saw %d tool results, want 5: %q", len(results), results)
	}
	if strings.Contains(results[0], "fatal") || strings.Contains(results[0], "not found") || !strings.Contains(results[0], "exit code 0") || !strings.Contains(results[0], "start") {
		t.Errorf("git status/log of the host's repository in the workbench: %q", results[0])
	}
	if !strings.Contains(results[1], "project.tar.gz") {
		t.Errorf("make build in the workbench: %q", results[1])
	}
	for _, want := range []string{"T-scratch\ntmp-ok\nhome-ok\nNo space left on device\n", "Read-only file system\nT-scratch-end"} {
		if !strings.Contains(results[1], want) {
			t.Errorf("the workbench's scratch from the shell tool: result lacks %q:\n%s", want, results[1])
		}
	}
	att := results[2]
	for _, tag := range []string{"T-token", "T-key", "T-runlever", "T-home", "T-sock", "T-levps", "T-tcp", "T-broker", "T-cfg", "T-git", "T-end"} {
		if !strings.Contains(att, tag) {
			t.Errorf("the attack's %s probe did not run (the tool result is cut or the shell failed): %q", tag, att)
		}
	}
	for what, secret := range map[string]string{"lev's token": strings.TrimSpace(string(token)), "lev's client key": keyLine, "the API key": key} {
		if secret != "" && strings.Contains(att, secret) {
			t.Errorf("the shell tool reached %s", what)
		}
	}
	for _, want := range []string{"/run/lever/token: No such file", "/run/lever/client.key: No such file", "'/var/lib/lev': No such file", "'/var/lib/lev/api.sock': No such file", "no bearer token"} {
		if !strings.Contains(att, want) {
			t.Errorf("attack result lacks %q:\n%s", want, att)
		}
	}
	if m := regexp.MustCompile(`(?s)T-tcp\n(.*)T-broker`).FindStringSubmatch(att); m == nil || strings.Count(m[1], "Failed to connect") != 3 {
		t.Errorf("lev API over loopback TCP from the workbench: want 3 refused connections:\n%s", att)
	}
	// The broker serves enrolment to certificate-less clients, so its TLS handshake can
	// succeed; every model route then answers 401, which git reports as wanting a username.
	if m := regexp.MustCompile(`(?s)T-broker\n(.*)T-end`).FindStringSubmatch(att); m == nil || !regexp.MustCompile(`(?i)ssl|tls|certificate|handshake|alert|401|403|could not read Username|Authentication failed`).MatchString(m[1]) {
		t.Errorf("the broker from the workbench without lev's certificate: want a refusal:\n%s", att)
	}
	if cfgAfter, err := os.ReadFile(cfgPath); err != nil || !bytes.Equal(cfgAfter, cfgBefore) {
		t.Errorf("the agent's shell changed lever.yaml on the host (err %v):\n%s", err, cfgAfter)
	}
	for _, name := range []string{"moved.yaml", "hard.yaml"} {
		if _, err := os.Lstat(filepath.Join(proj, name)); err == nil {
			t.Errorf("the agent's shell made %s from lever.yaml in the host's tree", name)
		}
	}
	for _, name := range []string{"hooks/pre-commit", "commondir"} {
		if _, err := os.Lstat(filepath.Join(proj, ".git", name)); err == nil {
			t.Errorf("the agent's shell wrote .git/%s in the host's repository", name)
		}
	}
	if after, err := os.ReadFile(filepath.Join(proj, ".git", "config")); err != nil || !bytes.Equal(after, gitConfigBefore) {
		t.Errorf("the agent's shell changed .git/config on the host (err %v):\n%s", err, after)
	}
	// Each attempt reached its file and was refused by the mount (the shell reports a
	// failed redirection on its own stderr, which the result also carries).
	for _, want := range []string{
		"cannot create /lever/lever.yaml: Read-only file system",
		"cannot move '/lever/lever.yaml' to '/lever/moved.yaml': Device or resource busy",
		"cannot remove '/lever/lever.yaml': Device or resource busy",
		"'/lever/hard.yaml' => '/lever/lever.yaml': Invalid cross-device link",
		"cannot create /lever/.git/hooks/pre-commit: Read-only file system",
		"cannot create /lever/.git/commondir: Read-only file system",
		"could not lock config file .git/config: Read-only file system",
		"Unable to create '/lever/.git/index.lock': Read-only file system",
	} {
		if !strings.Contains(att, want) {
			t.Errorf("attack result lacks %q:\n%s", want, att)
		}
	}
	if ctl, err := os.ReadFile(filepath.Join(proj, "cfg-control.txt")); err != nil || string(ctl) != "ok\n" {
		t.Errorf("control: the file beside lever.yaml was not written by the agent's shell: %q %v", ctl, err)
	}
	if notes, err := os.ReadFile(filepath.Join(proj, "NOTES.md")); err != nil || string(notes) != "built "+sfx+"\n" {
		t.Errorf("NOTES.md in the host's tree: %q %v", notes, err)
	}
	if _, err := os.Stat(filepath.Join(proj, "build", "project.tar.gz")); err != nil {
		t.Errorf("the build's output is not in the host's tree: %v", err)
	}

	// 4. lever ps lists the run, lever logs shows its tool calls, lever result its output.
	code, stdout, errs = leverIO("ps", "--json", "-c", cfgPath)
	if code != 0 || !strings.Contains(stdout, `"task"`) {
		t.Fatalf("lever ps --json: exit %d\n%s%s", code, stdout, errs)
	}
	id := regexp.MustCompile(`"id":\s*"([^"]+)"`).FindStringSubmatch(stdout)
	if id == nil {
		t.Fatalf("no run id in lever ps --json:\n%s", stdout)
	}
	code, stdout, errs = leverIO("logs", "-c", cfgPath, id[1])
	if code != 0 || len(regexp.MustCompile(`tool shell [{"]`).FindAllString(stdout+errs, -1)) != 3 || !strings.Contains(stdout+errs, "tool write_file {") {
		t.Errorf("lever logs %s: exit %d\n%s%s", id[1], code, stdout, errs)
	}
	code, stdout, errs = leverIO("result", "-c", cfgPath, id[1])
	if code != 0 || !strings.Contains(stdout, "done "+sfx) {
		t.Errorf("lever result %s: exit %d\n%s%s", id[1], code, stdout, errs)
	}

	// 5. On a pseudo-terminal: the shell call's ask answered yes, the taint gate's prompt
	// (Private data read, then a tool that could send it off) answered deny, the final
	// answer's gate prompt once. Both decisions land in the record and taint_audit.json.
	model.Store(&testutil.StandIn{Steps: []testutil.Step{
		{Tool: "read_file", Args: map[string]string{"path": "/etc/passwd"}},
		{Tool: "shell", Args: map[string]string{"command": "echo leaked-" + sfx + " > /lever/leak.txt"}},
		{Tool: "submit_output", Args: map[string]string{"output": "gated " + sfx}},
	}})
	term, code := ptyAnswers(t, []ptyAnswer{
		{prompt: "[y]es / [N]o? ", answer: "y"},
		{prompt: "allow [o]nce / for the [s]ession / [N]o? ", answer: "n"},
		{prompt: "allow [o]nce / for the [s]ession / [N]o? ", answer: "o"},
	}, "run", "-c", cfgPath, "gate")
	t.Logf("lever run gate on a pty: exit %d\n%s", code, term)
	if code != 0 || !strings.Contains(term, "gated "+sfx) {
		t.Fatalf("lever run gate: exit %d", code)
	}
	if _, err := os.Stat(filepath.Join(proj, "leak.txt")); err == nil {
		t.Errorf("the shell call denied at the gate ran")
	}
	gid := regexp.MustCompile(`run (r-[0-9a-f-]+)`).FindStringSubmatch(term)
	if gid == nil {
		t.Fatalf("no run id on the terminal")
	}
	runDir := filepath.Join(cfg.StateDir(), "guest", "levhome", "manager", "runs", gid[1])
	if real, err := filepath.EvalSymlinks(filepath.Join(cfg.StateDir(), "guest")); err == nil {
		runDir = filepath.Join(real, "levhome", "manager", "runs", gid[1])
	}
	tl, err := events.NewTail(filepath.Join(runDir, events.FileName))
	if err != nil {
		t.Fatalf("the run's events: %v", err)
	}
	evs, _ := tl.Next(1000)
	tl.Close()
	var trail []string
	for _, ev := range evs {
		switch ev.Type {
		case events.Ask:
			trail = append(trail, "ask:"+ev.Tool+":"+map[bool]string{true: "gate", false: "permission"}[ev.GatePrompt])
		case events.AnswerT:
			trail = append(trail, "answer:"+ev.Answer)
		case events.Gate:
			trail = append(trail, "gate:"+ev.Tool+":"+ev.Source)
		}
	}
	if got, want := strings.Join(trail, " "), "ask:shell:permission answer:once ask:shell:gate answer:deny gate:shell:UserDeny ask:submit_output:gate answer:once gate:submit_output:UserAllowOnce"; got != want {
		t.Errorf("events trail\n got %s\nwant %s", got, want)
	}
	calls, _ := os.ReadFile(filepath.Join(runDir, "stages", "0", "tool_calls.jsonl"))
	if !strings.Contains(string(calls), "approved when asked") || !strings.Contains(string(calls), string(taint.SourceUserDeny)) {
		t.Errorf("the record lacks the ask approval or the gate's deny:\n%s", calls)
	}
	audit, err := taint.ReadAudit(taint.AuditPath(runDir, 0))
	if err != nil {
		t.Fatalf("taint_audit.json: %v", err)
	}
	var got []string
	for _, r := range audit {
		got = append(got, r.Tool+":"+string(r.DecisionSource))
	}
	if j := strings.Join(got, " "); !strings.Contains(j, "shell:UserDeny") || !strings.Contains(j, "submit_output:UserAllowOnce") {
		t.Errorf("taint_audit.json decisions: %s", j)
	}
	b2, _ := json.Marshal(got)
	t.Logf("taint_audit.json decisions: %s", b2)
}

type ptyAnswer struct{ prompt, answer string }

// ptyAnswers runs this test binary as lever on a pseudo-terminal and answers each prompt
// in turn (the n-th answer when the terminal shows its prompt for the n-th time overall).
func ptyAnswers(t *testing.T, answers []ptyAnswer, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asLever+"=1")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var mu sync.Mutex
	var out bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	count := func(s string) int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(out.String(), s)
	}
	asked := map[string]int{}
	for _, a := range answers {
		asked[a.prompt]++
		deadline := time.Now().Add(60 * time.Second)
		for count(a.prompt) < asked[a.prompt] && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if count(a.prompt) < asked[a.prompt] {
			mu.Lock()
			t.Errorf("prompt %q #%d never shown; terminal:\n%s", a.prompt, asked[a.prompt], out.String())
			mu.Unlock()
			break
		}
		f.Write([]byte(a.answer + "\r"))
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err = <-waitErr:
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		err = <-waitErr
	}
	<-done
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	mu.Lock()
	defer mu.Unlock()
	return out.String(), code
}

// netnsProject is the setting every whole-jail netns test starts from: an empty project
// dir the jail's run user can write (and the dirs above it traversable), lever pointed at
// the netns substrate with namespace prefix prefix and its own state dir, the lev under
// test, and a random suffix that keeps this run's names and keys apart from others'.
func netnsProject(t *testing.T, prefix string) (dir, proj, sfx string) {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	sfx = hex.EncodeToString(b)
	dir = t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	proj = filepath.Join(dir, "proj")
	os.MkdirAll(proj, 0o777)
	os.Chmod(proj, 0o777)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_NETNS_PREFIX", prefix)
	t.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
	t.Setenv("LEVER_LEV_BINARY", levBinary(t))
	t.Setenv(asLever, "1")
	return dir, proj, sfx
}
