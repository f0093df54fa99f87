//go:build e2e

package bringup_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/testutil"
)

// levhomeRunUser is this test's own run user: the run user, its podman and
// /run/user/<uid> are host state on the netns substrate, shared with any other netns test
// running on the machine under the default name.
const levhomeRunUser = "lvtbjp"

// podmanExec runs argv in container name as the run user (stdin optional); it returns
// the combined output and the exit code.
func podmanExec(t *testing.T, guestNS, name string, stdin string, argv ...string) (string, int) {
	t.Helper()
	uid := strings.TrimSpace(sh(t, "id", "-u", levhomeRunUser))
	args := []string{"--net=/run/netns/" + guestNS, "runuser", "-u", levhomeRunUser, "--",
		"env", "XDG_RUNTIME_DIR=/run/user/" + uid, "HOME=/home/" + levhomeRunUser, "podman", "exec"}
	if stdin != "" {
		args = append(args, "-i")
	}
	cmd := exec.Command("nsenter", append(append(args, name), argv...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("podman exec %s: %v", name, err)
	}
	return string(out), code
}

func applyJSON(t *testing.T, cfgPath string) bringup.Result {
	t.Helper()
	out, code := lever(t, "apply", "--json", "-c", cfgPath)
	res, err := resultOf(out)
	if err != nil || code != 0 {
		t.Fatalf("apply --json: exit %d\n%s", code, out)
	}
	return res
}

func stepOf(res bringup.Result, id string) bringup.StepResult {
	for _, s := range res.Steps {
		if s.ID == id {
			return s
		}
	}
	return bringup.StepResult{}
}

// TestLevHomeAndBenchNetns brings a jail up on the netns substrate and checks the
// container layout as an agent's tools would meet it: two containers per agent, the
// workbench holding the agent's part of the tree and nothing of lev's (no enrolment dir,
// no lev home, the token's bytes nowhere in its filesystem; lev's container is the
// positive control that holds them), lev's settings pushed from the host through the
// enrol helper and re-pushed when the host file changes, a bad settings file refused on
// the host with nothing in the guest changed, and a warm up that costs what it cost
// before (1 guest call: the observation).
func TestLevHomeAndBenchNetns(t *testing.T) {
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
	os.MkdirAll(filepath.Join(tree, "src"), 0o777)
	os.Chmod(tree, 0o777)
	os.Chmod(filepath.Join(tree, "src"), 0o777)
	os.WriteFile(filepath.Join(tree, "manager-only.txt"), []byte("m"), 0o644)
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte("sk-lvtb-"+sfx+"\n"), 0o600)
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	settings := filepath.Join(dir, "lev-settings")
	os.MkdirAll(filepath.Join(settings, "agents"), 0o755)
	levConfig := filepath.Join(settings, "lev.toml")
	os.WriteFile(levConfig, []byte("[provider]\nmodel = \"model-one\"\n"), 0o644)
	os.WriteFile(filepath.Join(settings, "agents", "answer.toml"), []byte("name = \"answer\"\nversion = \"1\"\n[stages.answer]\ntools = [\"submit_output\"]\n"), 0o644)
	os.WriteFile(filepath.Join(settings, "policy.toml"), []byte("default = \"deny\"\n"), 0o644)
	jailPort, adminPort := freePort(t), freePort(t)
	cfgPath := filepath.Join(dir, "lever.yaml")
	writeCfg := func(lev testutil.YAMLLev) {
		y := testutil.NetnsYAML("t"+sfx, keyFile, srv.URL, jailPort, adminPort)
		y.Workers = []testutil.YAMLWorker{{Name: "w1", Dir: "src", LLMAuth: "api-key"}}
		y.Lev = lev
		y.Write(t, cfgPath)
	}
	goodKeys := testutil.YAMLLev{Config: levConfig, Agents: filepath.Join(settings, "agents"), Policy: filepath.Join(settings, "policy.toml")}
	writeCfg(goodKeys)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_NETNS_PREFIX", "lvtb")
	t.Setenv(netns.RunUserEnv, levhomeRunUser)
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

	out, code := lever(t, "up", "-c", cfgPath)
	t.Logf("first up:\n%s", out)
	if code != 0 {
		t.Fatalf("up: exit %d", code)
	}
	mgr, w1 := "lever-t"+sfx+"-manager", "lever-t"+sfx+"-worker-w1"
	mgrB, w1B := containers.BenchName(mgr), containers.BenchName(w1)

	// 1. Both containers of each agent run, the benches with role bench.
	out, code = lever(t, "status", "--json", "-c", cfgPath)
	var st bringup.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 {
		t.Fatalf("status: %v %d %s", err, code, out)
	}
	roles := map[string]string{}
	for _, c := range st.Containers {
		if c.Running {
			roles[c.Name] = c.Role
		}
	}
	for name, role := range map[string]string{mgr: "manager", mgrB: "bench", w1: "worker", w1B: "bench"} {
		if roles[name] != role {
			t.Errorf("%s: running with role %q, want %q (running: %v)", name, roles[name], role, roles)
		}
	}

	// 2. The guest dirs: each agent's lev home and bench dir, the run user's, mode 0700;
	// the settings beside the enrolment files.
	uid := strings.TrimSpace(sh(t, "id", "-u", levhomeRunUser))
	home := filepath.Join(cfg.StateDir(), "guest", "levhome")
	for _, a := range []string{"manager", "worker-w1"} {
		for _, d := range []string{filepath.Join(home, a), filepath.Join("/run/user", uid, "lever", "bench", a)} {
			fi, err := os.Lstat(d)
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || fmt.Sprint(fi.Sys().(*syscall.Stat_t).Uid) != uid {
				t.Errorf("%s: %v %v", d, fi, err)
			}
		}
		ag := filepath.Join("/run/user", uid, "lever", "agents", a)
		if got, _ := os.ReadFile(filepath.Join(ag, "config.toml")); !strings.Contains(string(got), "model-one") {
			t.Errorf("%s config.toml %q", a, got)
		}
		if _, err := os.Stat(filepath.Join(ag, "agents", "answer.toml")); err != nil {
			t.Errorf("%s blueprint not pushed: %v", a, err)
		}
		if _, err := os.Stat(filepath.Join(ag, "policy.toml")); err != nil {
			t.Errorf("%s policy not pushed: %v", a, err)
		}
	}
	if _, err := os.Stat(filepath.Join(tree, ".lev")); err == nil {
		t.Errorf("a lev home appeared in the tree")
	}

	// 3. The workbenches, attacked from inside: lev's enrolment dir and home are absent,
	// the token's bytes are nowhere; lev's own container finds them (positive control).
	token, err := os.ReadFile(filepath.Join("/run/user", uid, "lever", "agents", "manager", "token"))
	if err != nil {
		t.Fatal(err)
	}
	wtoken, _ := os.ReadFile(filepath.Join("/run/user", uid, "lever", "agents", "worker-w1", "token"))
	_, shCode := podmanExec(t, guestNS, mgrB, "", "/bin/sh", "-c", "true")
	hasShell := shCode == 0
	lsLev := func(name string) (string, int) {
		if hasShell {
			return podmanExec(t, guestNS, name, "", "ls", "/run/lever", "/var/lib/lev")
		}
		return podmanExec(t, guestNS, name, "", "/lev", "__probe", "ls:/run/lever", "ls:/var/lib/lev")
	}
	find := func(name, needle string, hasShell bool) string {
		if hasShell {
			out, _ := podmanExec(t, guestNS, name, needle, "/bin/sh", "-c", `read -r n; grep -rlF -e "$n" --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev / 2>/dev/null | tr '\n' ,; echo`)
			return out
		}
		out, _ := podmanExec(t, guestNS, name, needle, "/lev", "__probe", "find")
		return out
	}
	for _, tc := range []struct {
		container, needle string
	}{{mgrB, string(token)}, {w1B, string(wtoken)}, {w1B, string(token)}} {
		out, code := lsLev(tc.container)
		if code == 0 || strings.Contains(out, "client.key") || strings.Contains(out, "token") || strings.Contains(out, "config.toml") || strings.Contains(out, "runs") {
			t.Errorf("%s: lev's dirs visible (exit %d):\n%s", tc.container, code, out)
		}
		if f := find(tc.container, strings.TrimSpace(tc.needle), hasShell); strings.Contains(f, "/") {
			t.Errorf("%s: a token's bytes are readable in the workbench: %s", tc.container, f)
		}
	}
	if out, code := podmanExec(t, guestNS, mgr, "", "/lev", "__probe", "ls:/run/lever", "ls:/var/lib/lev"); code != 0 || !strings.Contains(out, "client.key") {
		t.Errorf("positive control: lev's container does not list its own dirs (exit %d):\n%s", code, out)
	}
	if f := find(mgr, strings.TrimSpace(string(token)), false); !strings.Contains(f, "/run/lever/token") {
		t.Fatalf("positive control: lev's container does not show its own token to the search: %q", f)
	}
	out, _ = podmanExec(t, guestNS, w1B, "", "/lev", "__probe", "ls:/lever")
	if hasShell {
		out, _ = podmanExec(t, guestNS, w1B, "", "ls", "/lever")
	}
	if !strings.Contains(out, "src") || strings.Contains(out, "manager-only.txt") {
		t.Errorf("worker bench sees more than its dir: %s", out)
	}

	// 4. lev ps in lev's container, no extra env. Needs helper levevents (LEV_LISTEN
	// unix:, LEV_TOKEN_FILE); levstub notes in the lev home when it had to bridge.
	if _, err := os.Stat(filepath.Join(home, "manager", "stub-listen")); err == nil {
		t.Logf("levevents contract (LEV_LISTEN=unix:, LEV_TOKEN_FILE) not in this lev: `lev ps` with no extra env not asserted")
	} else {
		out, code := podmanExec(t, guestNS, mgr, "", "/lev", "ps")
		if code != 0 {
			t.Errorf("lev ps in %s with no extra env: exit %d\n%s", mgr, code, out)
		}
	}

	// 5. A warm up changes nothing in one guest call: the observation, which carries the
	// settings' hash and the egress snapshot.
	res := applyJSON(t, cfgPath)
	if res.Changed || res.GuestCalls != 1 || stepOf(res, bringup.StepEnrol).Calls != 0 {
		t.Fatalf("warm up: changed %v, %d guest calls (want 1), enrol %+v", res.Changed, res.GuestCalls, stepOf(res, bringup.StepEnrol))
	}

	// 5b. A certificate renewal (the manager's certificate gone) re-enrols it and keeps
	// lev's bearer token: the running daemon holds the one it read at start.
	os.Remove(filepath.Join("/run/user", uid, "lever", "agents", "manager", "client.crt"))
	res = applyJSON(t, cfgPath)
	if en := stepOf(res, bringup.StepEnrol); !en.Changed || !strings.Contains(en.Detail, "enrolled manager") || strings.Contains(en.Detail, "lev settings") {
		t.Errorf("renewal: enrol step %+v", en)
	}
	if lv := stepOf(res, bringup.StepLev); lv.Changed {
		t.Errorf("renewal restarted a container: %s", lv.Detail)
	}
	if after, _ := os.ReadFile(filepath.Join("/run/user", uid, "lever", "agents", "manager", "token")); !bytes.Equal(after, token) {
		t.Errorf("renewal rotated lev's token under its running daemon")
	}

	// 6. A changed lev.config on the host is pushed at the next up (one enrol call, no
	// ticket), and restarts the lev containers, not the benches.
	os.WriteFile(levConfig, []byte("[provider]\nmodel = \"model-two\"\n"), 0o644)
	res = applyJSON(t, cfgPath)
	en, lv := stepOf(res, bringup.StepEnrol), stepOf(res, bringup.StepLev)
	if !en.Changed || en.Calls != 1 || !strings.Contains(en.Detail, "lev settings") || strings.Contains(en.Detail, "enrolled") {
		t.Errorf("settings change: enrol step %+v", en)
	}
	if !strings.Contains(lv.Detail, mgr+" recreated") || !strings.Contains(lv.Detail, w1+" recreated") || !strings.Contains(lv.Detail, mgrB+" unchanged") {
		t.Errorf("settings change: lev step %q", lv.Detail)
	}
	for _, a := range []string{"manager", "worker-w1"} {
		if got, _ := os.ReadFile(filepath.Join("/run/user", uid, "lever", "agents", a, "config.toml")); !strings.Contains(string(got), "model-two") {
			t.Errorf("%s: config.toml not re-pushed: %q", a, got)
		}
	}
	if out, code := podmanExec(t, guestNS, mgr, "", "/lev", "__probe", "ls:/run/lever"); code != 0 || !strings.Contains(out, "config.toml") {
		t.Errorf("lev does not see its settings: %s", out)
	}
	if res = applyJSON(t, cfgPath); res.Changed || res.GuestCalls != 1 {
		t.Errorf("warm up after the push: changed %v, %d guest calls", res.Changed, res.GuestCalls)
	}

	// 7. Bad settings are refused on the host, naming file, key and line; the guest keeps
	// the last good ones. Positive control: step 6 pushed a good edit the same way.
	before, _ := os.ReadFile(filepath.Join("/run/user", uid, "lever", "agents", "manager", "config.toml"))
	os.WriteFile(levConfig, []byte("[provider]\nmodel = \"model-three\"\nmodle = \"typo\"\n"), 0o644)
	for _, args := range [][]string{{"up", "-c", cfgPath}, {"apply", "--dry-run", "-c", cfgPath}} {
		out, code := lever(t, args...)
		if code == 0 || !strings.Contains(out, "lev.config: "+levConfig+":3") || !strings.Contains(out, "modle") {
			t.Errorf("%s with a bad lev.config: exit %d\n%s", args[0], code, out)
		}
	}
	if after, _ := os.ReadFile(filepath.Join("/run/user", uid, "lever", "agents", "manager", "config.toml")); !bytes.Equal(before, after) {
		t.Errorf("a refused lev.config changed the guest: %q", after)
	}
	os.WriteFile(levConfig, []byte("[provider]\nmodel = \"model-two\"\n"), 0o644)

	// 8. Settings from the tree, spelled through a symlink from outside, are refused.
	os.WriteFile(filepath.Join(tree, "lev.toml"), []byte("[provider]\nmodel = \"agent-written\"\n"), 0o666)
	link := filepath.Join(settings, "via-link.toml")
	os.Symlink(filepath.Join(tree, "lev.toml"), link)
	linked := goodKeys
	linked.Config = link
	writeCfg(linked)
	out, code = lever(t, "up", "-c", cfgPath)
	if code == 0 || !strings.Contains(out, "lev.config: ") || !strings.Contains(out, "inside the tree") {
		t.Errorf("lev.config through a symlink into the tree: exit %d\n%s", code, out)
	}
	writeCfg(goodKeys)
	if res = applyJSON(t, cfgPath); res.Changed {
		t.Errorf("back to the good settings: changed %+v", res.Steps)
	}
}
