//go:build e2e

package bringup_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/cli"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/testutil"
)

// leverIO runs lever with stdout and stderr apart.
func leverIO(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := cli.Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestHostCommandsNetns drives the host commands against a real jail on the netns
// substrate: before lever up every command that needs the jail is refused (exit 2, one
// line, nothing made); after it, lever run completes an agent's task through the broker,
// lever ps/logs/result find the manager's and a worker's runs, lever shell runs in each
// agent's workbench with that agent's view of the tree and no API key in reach, and every
// bad input is refused with exit 2 while its positive control beside it succeeds.
func TestHostCommandsNetns(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	b := make([]byte, 3)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	tree := filepath.Join(dir, "tree")
	for _, d := range []string{tree, filepath.Join(tree, "src")} {
		os.MkdirAll(d, 0o777)
		os.Chmod(d, 0o777)
	}
	marker := "lvtb-marker-" + sfx
	os.WriteFile(filepath.Join(tree, "marker.txt"), []byte(marker+"\n"), 0o644)
	key := "sk-lvtb-" + sfx + "-" + hex.EncodeToString(append(b, b...))
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	up := &upstream{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		// The asker agent offers write_file: its first turn writes a file, its second
		// (after the tool's result) submits; every other agent submits at once.
		if bytes.Contains(body, []byte(`"write_file"`)) && !bytes.Contains(body, []byte(`"role":"tool"`)) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"c2","object":"chat.completion","model":"test-model","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_w","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"asked.txt\",\"content\":\"written after yes\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
			return
		}
		up.handler(w, r)
	}))
	defer srv.Close()
	settings := filepath.Join(dir, "lev-settings")
	os.MkdirAll(filepath.Join(settings, "agents"), 0o755)
	os.WriteFile(filepath.Join(settings, "config.toml"), []byte("[provider]\nmodel = \"test-model\"\n\n[tool_permissions]\nwrite_file = \"ask\"\n"), 0o644)
	os.WriteFile(filepath.Join(settings, "agents", "asker.toml"), []byte("name = \"asker\"\nversion = \"1\"\n[stages.write]\ntools = [\"write_file\", \"submit_output\"]\n"), 0o644)
	os.WriteFile(filepath.Join(settings, "agents", "answer.toml"), []byte("name = \"answer\"\nversion = \"1\"\n[stages.answer]\ntools = [\"submit_output\"]\n"), 0o644)
	jailPort, adminPort := freePort(t), freePort(t)
	cfgPath := filepath.Join(dir, "lever.yaml")
	y := testutil.NetnsYAML("t"+sfx, keyFile, srv.URL, jailPort, adminPort)
	y.ManagerPorts = []int{jailPort}
	y.Workers = []testutil.YAMLWorker{{Name: "w1", Dir: "src", LLMAuth: "api-key"}}
	y.Lev = testutil.YAMLLev{Config: filepath.Join(settings, "config.toml"), Agents: filepath.Join(settings, "agents")}
	y.Write(t, cfgPath)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_NETNS_PREFIX", "lvtb")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
	t.Setenv("LEVER_LEV_BINARY", levBinary(t))
	t.Setenv(asLever, "1")
	guestNS := "lvtbt" + sfx
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lever(t, "destroy", "-c", cfgPath)
		if be, err := backend.New(cfg); err == nil {
			bringup.TeardownInPlace(context.Background(), be)
		}
	})
	taskFile := filepath.Join(dir, "task.txt")
	os.WriteFile(taskFile, []byte("the task"), 0o644)

	refused := func(stage string, args []string, want ...string) {
		t.Helper()
		code, out, errs := leverIO(args...)
		if code != 2 || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%s: lever %v: exit %d, want 2 with one line:\n%s%s", stage, args, code, out, errs)
		}
		for _, w := range want {
			if !strings.Contains(errs, w) {
				t.Errorf("%s: lever %v: error %q lacks %q", stage, args, errs, w)
			}
		}
	}
	notUp := []string{"jail t" + sfx + " is not up", "run lever up -c " + cfgPath}

	// 1. Before lever up: refused, nothing made (no namespace, no state).
	for _, args := range [][]string{
		{"ps", "-c", cfgPath},
		{"run", "-c", cfgPath, "answer"},
		{"logs", "-c", cfgPath, "r-20261130-000000-abcdef"},
		{"result", "-c", cfgPath, "manager/r-20261130-000000-abcdef"},
		{"shell", "-c", cfgPath, "--", "ls", "/"},
	} {
		refused("not up", args, notUp...)
	}
	refused("not up", []string{"run", "-c", cfgPath, "--worker", "nope"}, `worker "nope" is not in `+cfgPath, "the agents are manager, w1")
	refused("not up", []string{"run", "-c", cfgPath, "--input", "x", "--input-file", taskFile}, "--input and --input-file")
	if _, err := os.Stat("/run/netns/" + guestNS); err == nil {
		t.Fatalf("a refused command made the guest namespace %s", guestNS)
	}
	if _, err := os.Stat(cfg.StateDir()); err == nil {
		t.Fatalf("a refused command made the state dir %s", cfg.StateDir())
	}

	out, code := lever(t, "up", "-c", cfgPath)
	if code != 0 {
		t.Fatalf("up: exit %d\n%s", code, out)
	}

	// 2. lever run in the manager and in a worker; the result reaches the host.
	start := time.Now()
	code, stdout, errs := leverIO("run", "-c", cfgPath, "--input-file", taskFile, "answer")
	t.Logf("lever run (%s, host command to result, stand-in model):\n%s%s", time.Since(start).Round(time.Millisecond), stdout, errs)
	if code != 0 || !strings.Contains(stdout, "42") {
		t.Fatalf("lever run: exit %d", code)
	}
	code, stdout, errs = leverIO("run", "-c", cfgPath, "--worker", "w1", "--input", "worker task", "answer")
	if code != 0 || !strings.Contains(stdout, "42") {
		t.Fatalf("lever run --worker w1: exit %d\n%s%s", code, stdout, errs)
	}
	up.mu.Lock()
	for i, a := range up.auth {
		if a != "Bearer "+key {
			t.Errorf("upstream request %d carried %q, not the broker's key", i, a)
		}
	}
	up.mu.Unlock()

	// 3. lever ps lists both, each with its agent.
	start = time.Now()
	code, stdout, errs = leverIO("ps", "--json", "-c", cfgPath)
	t.Logf("lever ps --json (2 agents): %s", time.Since(start).Round(time.Millisecond))
	var ps struct {
		Instance string `json:"instance"`
		Runs     []struct {
			Agent     string `json:"agent"`
			Container string `json:"container"`
			Run       struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"run"`
		} `json:"runs"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &ps) != nil || len(ps.Runs) != 2 {
		t.Fatalf("lever ps --json: exit %d\n%s%s", code, stdout, errs)
	}
	ids := map[string]string{}
	for _, r := range ps.Runs {
		ids[r.Agent] = r.Run.ID
		if r.Run.Status != "completed" {
			t.Errorf("run %s of %s is %s", r.Run.ID, r.Agent, r.Run.Status)
		}
	}
	if ids["manager"] == "" || ids["w1"] == "" {
		t.Fatalf("ps agents: %v", ids)
	}
	code, stdout, _ = leverIO("ps", "-c", cfgPath)
	if code != 0 || !strings.Contains(stdout, "w1 ") || !strings.Contains(stdout, ids["w1"]) || !strings.Contains(stdout, ids["manager"]) {
		t.Errorf("lever ps: exit %d\n%s", code, stdout)
	}

	// 4. logs and result find each run where it is.
	for agent, id := range ids {
		code, stdout, errs = leverIO("logs", "-c", cfgPath, id)
		if code != 0 || !strings.Contains(stdout+errs, "submit_output") {
			t.Errorf("lever logs %s (%s): exit %d\n%s%s", id, agent, code, stdout, errs)
		}
		code, stdout, errs = leverIO("result", "-c", cfgPath, agent+"/"+id)
		if code != 0 || !strings.Contains(stdout, "42") {
			t.Errorf("lever result %s/%s: exit %d\n%s%s", agent, id, code, stdout, errs)
		}
	}

	// 5. bad input on a jail that is up, each beside its control above.
	refused("up", []string{"logs", "-c", cfgPath, "r-20990101-000000-000000"}, "run r-20990101-000000-000000 does not exist", "lever ps lists the runs")
	refused("up", []string{"result", "-c", cfgPath, "w1/" + ids["manager"]}, "does not exist in w1")
	code, _, errs = leverIO("run", "-c", cfgPath, "no-such-agent")
	if code != 2 || !strings.Contains(errs, "no-such-agent") {
		t.Errorf("unknown agent: exit %d, want 2 naming it: %s", code, errs)
	}
	if code, stdout, _ = leverIO("ps", "--json", "-c", cfgPath); code != 0 || strings.Count(stdout, `"id"`) != 2 {
		t.Errorf("a refused run left a run behind:\n%s", stdout)
	}

	// 6. lever shell: each agent's workbench, its view of the tree, exit codes through.
	// Each verb's exec session is gone soon after it returns: the run user's exec-session
	// conmons (counted while one runs: the control) are back to none within 15 s after
	// (the provisioned exit_command_delay is 10 s; podman's default kept them 300 s).
	runUID := strings.TrimSpace(sh(t, "id", "-u", "lever"))
	held := make(chan int, 1)
	go func() {
		c, _, _ := leverIO("shell", "-c", cfgPath, "--", "sleep", "2")
		held <- c
	}()
	during := 0
	for end := time.Now().Add(2 * time.Second); during == 0 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		during = execConmons(t, runUID)
	}
	if c := <-held; c != 0 || during == 0 {
		t.Errorf("control: lever shell -- sleep 2 exit %d, %d exec conmons while it ran (want 1 or more)", c, during)
	}
	code, stdout, errs = leverIO("shell", "-c", cfgPath, "manager", "--", "ls", "/")
	if code != 0 || !strings.Contains(stdout, "lever") || !strings.Contains(stdout, "usr") {
		t.Errorf("lever shell manager -- ls /: exit %d\n%s%s", code, stdout, errs)
	}
	code, stdout, errs = leverIO("shell", "-c", cfgPath, "w1", "--", "ls", "/lever")
	if code != 0 || strings.TrimSpace(stdout) != "src" {
		t.Errorf("lever shell w1 -- ls /lever: exit %d, %q %s", code, stdout, errs)
	}
	start = time.Now()
	if code, _, errs = leverIO("shell", "-c", cfgPath, "--", "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("shell exit code: %d, want 3 (%s)", code, errs)
	}
	t.Logf("lever shell -- sh -c 'exit 3': %s", time.Since(start).Round(time.Millisecond))
	// grep exits 2 on any unreadable file, so the verdict is its output: the files that
	// hold the bytes, then a line saying grep ran to the end.
	grep := func(agent, needle string) string {
		_, stdout, _ := leverIO("shell", "-c", cfgPath, agent, "--", "sh", "-c",
			`grep -rslF -e "$1" /lever /tmp /etc /run /var /home /usr/local 2>/dev/null; echo grep-ran`, "sh", needle)
		return stdout
	}
	for _, agent := range []string{"manager", "w1"} {
		if got := grep(agent, key); got != "grep-ran\n" {
			t.Errorf("%s's workbench: grep for the API key printed %q (want no file)", agent, got)
		}
	}
	// Control: the same grep finds a string that is in the manager's tree.
	if got := grep("manager", marker); !strings.Contains(got, "/lever/marker.txt\n") || !strings.HasSuffix(got, "grep-ran\n") {
		t.Errorf("control grep for the tree's marker printed %q", got)
	}
	refused("up", []string{"shell", "-c", cfgPath, "nope", "--", "ls"}, `worker "nope"`, "manager, w1")
	left := execConmons(t, runUID)
	for end := time.Now().Add(15 * time.Second); left > 0 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		left = execConmons(t, runUID)
	}
	if left != 0 {
		t.Errorf("%d exec sessions' conmon processes left 15 s after the lever shell verbs returned (podman's exit delay not 10 s?)", left)
	}
	// lever doctor on the running jail: its firewall verified, no leftover process, no
	// blocker on this host, exit 0.
	code, stdout, errs = leverIO("doctor", "--json", "-c", cfgPath)
	var doc struct {
		Schema   int `json:"schema"`
		Blockers int `json:"blockers"`
		Checks   []struct{ ID, Status, Detail string }
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || doc.Schema != 1 {
		t.Fatalf("lever doctor --json: exit %d, %v:\n%s%s", code, err, stdout, errs)
	}
	for _, c := range doc.Checks {
		if (c.ID == "jail" && (c.Status != "ok" || !strings.Contains(c.Detail, "firewall verified"))) ||
			(c.ID == "leftover processes" && c.Status != "ok") || c.Status == "blocker" {
			t.Errorf("lever doctor on the running jail: %s %s: %s", c.ID, c.Status, c.Detail)
		}
	}
	if code != 0 || doc.Blockers != 0 {
		t.Errorf("lever doctor on the running jail: exit %d, %d blockers\n%s", code, doc.Blockers, stdout)
	}

	// 7. Interactive: lever run on a pseudo-terminal (this binary as lever, no human).
	// lev's ask for write_file reaches the host terminal; "n" refuses it (the file is not
	// written), "y" allows it (the file is in the host's tree). The "n" run is the control
	// that the answer, not the run, decides.
	for _, tc := range []struct {
		answer  string
		written bool
	}{{"n", false}, {"y", true}} {
		os.Remove(filepath.Join(tree, "asked.txt"))
		out, code := ptyLever(t, tc.answer, "run", "-c", cfgPath, "asker")
		t.Logf("lever run asker on a pty, answering %q: exit %d\n%s", tc.answer, code, out)
		if !strings.Contains(out, "write_file") || !strings.Contains(out, "wants") {
			t.Errorf("answer %q: the ask never reached the host terminal", tc.answer)
		}
		_, err := os.Stat(filepath.Join(tree, "asked.txt"))
		if (err == nil) != tc.written {
			t.Errorf("answer %q: asked.txt written=%v, want %v", tc.answer, err == nil, tc.written)
		}
		if tc.written && code != 0 {
			t.Errorf("answer %q: exit %d, want 0", tc.answer, code)
		}
	}
}

// ptyLever runs this test binary as lever on a pseudo-terminal, answers the first
// prompt ("? ") with answer, and returns what the terminal showed and the exit code.
func ptyLever(t *testing.T, answer string, args ...string) (string, int) {
	t.Helper()
	return ptyAnswers(t, []ptyAnswer{{prompt: "? ", answer: answer}}, args...)
}

// execConmons counts the conmon processes of exec sessions (conmon --exec-attach) run by
// uid.
func execConmons(t *testing.T, uid string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil || !strings.HasPrefix(string(st), "Name:\tconmon\n") {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.Contains(string(cmd), "\x00--exec-attach\x00") {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" && f[1] == uid {
				n++
			}
		}
	}
	return n
}
