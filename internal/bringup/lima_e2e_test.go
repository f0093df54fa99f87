//go:build e2e

package bringup_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/acceptance"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/testutil"
)

// Test addresses for the acceptance probes on Lima. The VM's user-mode network leaves
// through the test's loopback-only namespace, so none of these reach anything even if the
// jail's egress let them through: a leak shows as a probe that connected or was refused
// by slirp, never as traffic to a real address.
const (
	limaLAN       = "192.168.77.10:80"
	limaInternet  = "198.51.100.10:443"
	limaDNS       = "198.51.100.53:53"
	limaLinkLocal = "169.254.169.253:80"
	limaMetadata  = "169.254.169.254:80"
)

// limaUp is one run as the VM's unprivileged owner, inside a loopback-only namespace.
type limaUp struct {
	user, home, ns, prefix string
	uid                    int
	bin                    string // lever and lev
	dir                    string
	vm                     string
}

func (e *limaUp) env() []string {
	return []string{"HOME=" + e.home, "USER=" + e.user, "LOGNAME=" + e.user,
		"LIMA_HOME=" + e.home + "/.lima", fmt.Sprintf("XDG_RUNTIME_DIR=/run/user/%d", e.uid),
		"LEVER_LEV_BINARY=" + e.bin + "/lev",
		"PATH=" + e.prefix + "/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		// a person measuring sets it to see each guest call: lever appends them to a file
		// in the owner's home (stderr would mix them into --json output), logged below
		guest.TraceEnv + "=" + e.tracePath()}
}

// tracePath is where lever writes its guest-call trace when the person running the test
// asked for one (guest.TraceEnv set), "" otherwise.
func (e *limaUp) tracePath() string {
	if os.Getenv(guest.TraceEnv) == "" {
		return ""
	}
	return e.home + "/guest-trace.log"
}

// logTrace logs and empties the trace lever wrote since the last call, and returns it
// ("" when none was asked for).
func (e *limaUp) logTrace(t *testing.T, what string) string {
	p := e.tracePath()
	if p == "" {
		return ""
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	t.Logf("TRACE %s:\n%s", what, b)
	os.Truncate(p, 0)
	return string(b)
}

var (
	// isUp is up's closing line: its duration and guest calls.
	isUp = regexp.MustCompile(`is up \(([0-9hms.]+), (\d+) guest calls\)`)
	// bothTreesPresent is the image step's detail when the helper found both trees whole.
	bothTreesPresent = regexp.MustCompile(`^lev's tree \S+ present; workbench \S+ present; `)
)

// afterBoot is how long a bring-up that booted the guest ran after the boot, read from
// its trace: from the start of the first guest call that answered after one that did not
// (the observation, made while the guest was down; the trace's clock starts with it, as
// the run's own does) to total, the run's duration. ok is false when the trace shows no
// such call (no trace asked for, or a guest that was up).
func afterBoot(trace string, total time.Duration) (_ time.Duration, ok bool) {
	down := false
	for _, c := range guest.ParseTrace(trace) {
		if !c.Answered {
			down = true
			continue
		}
		if !down {
			return 0, false
		}
		return total - c.At, true
	}
	return 0, false
}

func (e *limaUp) as(t *testing.T, argv ...string) (string, int) {
	t.Helper()
	args := append(append([]string{"netns", "exec", e.ns, "runuser", "-u", e.user, "--", "env", "-i"}, e.env()...), argv...)
	cmd := exec.Command("ip", args...)
	cmd.Dir = "/"
	var o bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &o
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	return o.String(), 0
}

// lever runs the lever binary as the owner; every call is logged with its duration.
func (e *limaUp) lever(t *testing.T, args ...string) (string, int) {
	t.Helper()
	s := time.Now()
	if len(args) > 0 && (args[0] == "up" || args[0] == "apply") {
		args = append([]string{args[0], "--yes"}, args[1:]...) // the test's own config: confirmed as a script does
	}
	out, code := e.as(t, append([]string{e.bin + "/lever"}, append(args, "-c", e.dir+"/lever.yaml")...)...)
	t.Logf("TIMING lever %s: exit %d in %.1fs\n%s", strings.Join(args, " "), code, time.Since(s).Seconds(), out)
	return out, code
}

// guest runs a script in the VM as the run user over Lima's ssh config.
func (e *limaUp) guest(t *testing.T, script string) (string, int) {
	t.Helper()
	return e.as(t, "ssh", "-F", e.home+"/.lima/"+e.vm+"/ssh.config", "-o", "LogLevel=ERROR", "lima-"+e.vm, "--", script)
}

// limaTaskSteps is the daily loop's task on the real VM: git and the project's build in the
// workbench through the shell tool, a file written into the tree and read back.
var limaTaskSteps = []testutil.Step{
	// A repository of the agent's own, in a subdirectory: a .git at the tree's root made
	// now would be protected from the next up on (git: read-only), and the warm apply
	// below checks that nothing changes.
	{Tool: "shell", Args: map[string]string{"command": "git init -q scratch && git -C scratch status --short"}},
	{Tool: "shell", Args: map[string]string{"command": "make build && cat build/SUMS"}},
	{Tool: "write_file", Args: map[string]string{"path": "NOTES.md", "content": "built in the VM\n"}},
	{Tool: "read_file", Args: map[string]string{"path": "NOTES.md"}},
	{Tool: "submit_output", Args: map[string]string{"output": "task done in the VM"}},
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

// TestLimaUpstream is not a test: it is the fake OpenAI-compatible upstream, run inside
// the test's namespace (the broker, also there, reaches it on loopback). It appends each
// request's Authorization header to $LEVER_TEST_UPSTREAM_LOG.
func TestLimaUpstream(t *testing.T) {
	addr, logPath := os.Getenv("LEVER_TEST_UPSTREAM"), os.Getenv("LEVER_TEST_UPSTREAM_LOG")
	if addr == "" {
		t.Skip("helper process only")
	}
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	up := &upstream{}
	task := &testutil.StandIn{Steps: limaTaskSteps}
	h := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(f, "%q\n", r.Header.Get("Authorization"))
		f.Sync()
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"name":"shell"`)) {
			task.ServeHTTP(w, r) // the workbench task: git, the build, a file
			return
		}
		up.handler(w, r)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Fatal(http.Serve(l, http.HandlerFunc(h)))
}

// TestLeverUpAcceptanceLima is the issue-7 flow on the real Lima VM: lever up from nothing
// to lev in the guest's rootless podman, acceptance all PASS (limits enforced: cgroup v2 in
// the guest), an agent run through the broker's /llm/ route with the key seen by the
// upstream on every request and nowhere in the guest, a second up that changes nothing,
// and a destroy that leaves nothing.
func TestLeverUpAcceptanceLima(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.LockVM(t)
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "ssh", "runuser", "useradd"} {
		testutil.RequireTool(t, tool)
	}
	t0 := time.Now()
	root, _ := filepath.Abs("../..")
	cache := os.Getenv("LEVER_LIMA_CACHE")
	if cache == "" {
		cache = filepath.Join(root, ".cache", "lima")
	}
	image := lastLine(sh(t, filepath.Join(root, "scripts/lima/build-guest-image.sh"), cache))
	prefix := lastLine(sh(t, filepath.Join(root, "scripts/lima/build-limactl.sh"), cache))

	b := make([]byte, 3)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	e := &limaUp{user: "lvtm" + sfx, ns: "lvtm" + sfx, prefix: prefix}
	name := "m" + sfx

	bin, err := os.MkdirTemp("", "lvtm-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	os.Chmod(bin, 0o755)
	e.bin = bin
	for _, p := range []struct{ out, pkg string }{{"lever", "./cmd/lever"}, {"lev", "./internal/bringup/testdata/levstub"}} { // lev with the test bridges (bringup_e2e_test.go levBinary); built as `make build` builds (stripped, -trimpath), so what travels into the guest is the size users send
		c := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-tags", "remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp", "-o", filepath.Join(bin, p.out), p.pkg)
		c.Dir = root
		c.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", p.out, err, out)
		}
	}

	sh(t, "useradd", "-m", "-s", "/bin/bash", e.user)
	e.home = "/home/" + e.user
	e.uid, _ = strconv.Atoi(strings.TrimSpace(sh(t, "id", "-u", e.user)))
	rt := fmt.Sprintf("/run/user/%d", e.uid)
	sh(t, "install", "-d", "-m", "0700", "-o", e.user, "-g", e.user, rt)
	sh(t, "ip", "netns", "add", e.ns)
	sh(t, "ip", "-n", e.ns, "link", "set", "lo", "up")
	upLog := filepath.Join(t.TempDir(), "upstream.log")
	t.Cleanup(func() {
		// Best effort, in order: lever destroy, the VM, then the user's processes (by pid),
		// the user, its runtime dir and the namespace (which ends the upstream helper).
		e.as(t, bin+"/lever", "destroy", e.dir+"/lever.yaml")
		e.as(t, "limactl", "delete", "--force", e.vm)
		for _, sel := range [][]string{{"-u", strconv.Itoa(e.uid)}} {
			if out, err := exec.Command("pgrep", sel...).Output(); err == nil {
				for _, p := range strings.Fields(string(out)) {
					exec.Command("kill", "-KILL", p).Run()
				}
				time.Sleep(time.Second)
			}
		}
		if out, err := exec.Command("ip", "netns", "pids", e.ns).Output(); err == nil {
			for _, p := range strings.Fields(string(out)) {
				exec.Command("kill", "-KILL", p).Run()
			}
		}
		exec.Command("userdel", "-r", "-f", e.user).Run()
		os.RemoveAll(rt)
		exec.Command("ip", "netns", "del", e.ns).Run()
	})

	// The upstream, on the namespace's loopback.
	upAddr := "127.0.0.1:18080"
	hc := exec.Command("ip", "netns", "exec", e.ns, os.Args[0], "-test.run=^TestLimaUpstream$")
	hc.Env = append(os.Environ(), "LEVER_TEST_UPSTREAM="+upAddr, "LEVER_TEST_UPSTREAM_LOG="+upLog)
	var hout bytes.Buffer
	hc.Stdout, hc.Stderr = &hout, &hout
	if err := hc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Process.Kill(); hc.Wait() })

	key := "sk-lvtm-" + sfx + "-" + hex.EncodeToString(append(b, b...))
	e.dir = e.home + "/proj"
	e.vm = "lever-" + name
	jailPort, adminPort := 18443, 18444
	// lev's blueprint comes from the user's lev settings on the host, never the tree.
	for _, d := range []string{"tree/src", "lev-agents"} {
		os.MkdirAll(filepath.Join(e.dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(e.dir, "tree/README.md"), []byte("hello\n"), 0o644)
	os.WriteFile(filepath.Join(e.dir, "lev-agents/answer.toml"), []byte("name = \"answer\"\nversion = \"1\"\n[stages.answer]\ntools = [\"submit_output\"]\n"), 0o644)
	os.WriteFile(filepath.Join(e.dir, "lev-agents/task.toml"), []byte("name = \"task\"\nversion = \"1\"\n[stages.work]\ntools = [\"shell\", \"write_file\", \"read_file\", \"submit_output\"]\n"), 0o644)
	os.WriteFile(filepath.Join(e.dir, "tree/src/main.c"), []byte("int main(void) { return 0; }\n"), 0o644)
	os.WriteFile(filepath.Join(e.dir, "tree/Makefile"), []byte(dailyMakefile), 0o644)
	os.WriteFile(filepath.Join(e.dir, "key"), []byte(key+"\n"), 0o600)
	testutil.LeverYAML{Name: name, Backend: "lima", Tree: "tree", Egress: "closed", Disk: "4GiB", ManagerPorts: []int{jailPort},
		Broker: testutil.YAMLBroker{LLMAuth: "api-key", APIKeyFile: "key", LLMUpstream: "http://" + upAddr + "/v1", JailPort: jailPort, AdminPort: adminPort},
		Lima:   &testutil.YAMLLima{Image: image + "/disk.qcow2", Kernel: image + "/vmlinuz", Initrd: image + "/initrd.img", Limactl: prefix + "/bin/limactl", Accel: "tcg", CPUs: 2, Memory: "2GiB"},
		Lev:    testutil.YAMLLev{Agents: "lev-agents"},
	}.Write(t, filepath.Join(e.dir, "lever.yaml"))
	sh(t, "chown", "-R", e.user+":"+e.user, e.dir)
	t.Logf("TIMING setup (artifacts, builds, user, namespace): %.1fs", time.Since(t0).Seconds())

	accArgs := []string{"acceptance", "--json", "--lan", limaLAN, "--internet", limaInternet, "--dns", limaDNS, "--link-local", limaLinkLocal, "--metadata", limaMetadata}
	acceptancePasses := func(stage string) {
		t.Helper()
		out, code := e.lever(t, accArgs...)
		res := checks(t, out)
		for id, r := range res {
			if r.Status != acceptance.Pass {
				t.Errorf("%s: %s is %s, want PASS: %s", stage, id, r.Status, r.Detail)
			}
		}
		if code != 0 || len(res) < 12 {
			t.Fatalf("%s: acceptance exit %d with %d checks:\n%s", stage, code, len(res), out)
		}
	}

	// 1. cold: from nothing to lev running in the guest's rootless podman.
	out, code := e.lever(t, "up")
	trace := e.logTrace(t, "cold up")
	if code != 0 || !strings.Contains(out, "lever-"+name+"-manager running") {
		t.Fatalf("cold up: exit %d", code)
	}
	if m := isUp.FindStringSubmatch(out); m != nil {
		total, _ := time.ParseDuration(m[1])
		if d, ok := afterBoot(trace, total); ok {
			t.Logf("FIGURE cold up: %s in %s guest calls, from the call after the boot to the last step's end %s", total, m[2], d.Round(10*time.Millisecond))
		}
	}
	// LEVER_TEST_HOLD=<file>: keep the fresh jail up for a person's measurements until
	// that file exists (then the test goes on, and cleans up, as usual).
	if hold := os.Getenv("LEVER_TEST_HOLD"); hold != "" {
		t.Logf("HOLD: the VM waits for %s; reach it with: ip netns exec %s runuser -u %s -- ssh -F %s/.lima/%s/ssh.config lima-%s", hold, e.ns, e.user, e.home, e.vm, e.vm)
		for {
			if _, err := os.Stat(hold); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
	}
	// The podman service is lever's transient unit (the manager shares the jail's network
	// namespace in a VM), and it is the same process after the agent's run and acceptance
	// (Debian's socket-activated service quit after 5 s idle and was started again).
	service := func() string {
		o, c := e.guest(t, `p=$(cat /run/user/$(id -u)/podman/lever-service.pid) && kill -0 "$p" && echo "$p $(systemctl --user list-units --state=active --plain --no-legend 'lever-podman-*.service' | wc -l)"`)
		if c != 0 {
			t.Fatalf("the podman service's pid: exit %d: %s", c, o)
		}
		return strings.TrimSpace(o)
	}
	svc := service()
	if !strings.HasSuffix(svc, " 1") {
		t.Fatalf("the podman service after the cold up: %q, want its pid and one lever-podman unit", svc)
	}
	// Acceptance runs once, after the agent's run: its whole-filesystem key scan is the
	// slowest step under TCG (~4 MB/s), and after the run is when a leaked key would show.

	// 2. the daily loop from the host, through the forwarded podman socket: lever run of an
	// agent whose tools use the workbench (git, the build, a file written and read back),
	// its model calls through the broker's /llm/ route; then ps, logs, result and shell.
	cfgPath := e.dir + "/lever.yaml"
	s := time.Now()
	runOut, runCode := e.as(t, e.bin+"/lever", "run", "-c", cfgPath, "--allow", "shell", "task")
	t.Logf("TIMING lever run (workbench task) on the VM: exit %d in %.1fs\n%s", runCode, time.Since(s).Seconds(), runOut)
	auths := readAuths(t, upLog)
	if runCode != 0 || !strings.Contains(runOut, "task done in the VM") || len(auths) < len(limaTaskSteps) {
		t.Fatalf("the agent did not complete its task through the broker (%d upstream requests)\n%s", len(auths), hout.String())
	}
	for _, want := range []string{"tool shell {", "tool write_file {", "tool read_file {", "tool submit_output {"} {
		if !strings.Contains(runOut, want) {
			t.Errorf("lever run's live progress lacks %q", want)
		}
	}
	if notes, err := os.ReadFile(filepath.Join(e.dir, "tree", "NOTES.md")); err != nil || string(notes) != "built in the VM\n" {
		t.Errorf("NOTES.md in the host's tree: %q %v", notes, err)
	}
	for _, p := range []string{"tree/build/project.tar.gz", "tree/scratch/.git"} {
		if _, err := os.Stat(filepath.Join(e.dir, p)); err != nil {
			t.Errorf("the workbench's git/build output is not in the host's tree: %v", err)
		}
	}
	runOut, runCode = e.as(t, e.bin+"/lever", "run", "-c", cfgPath, "answer")
	if runCode != 0 || !strings.Contains(runOut, "42") {
		t.Fatalf("lever run answer: exit %d\n%s", runCode, runOut)
	}
	psOut, code := e.as(t, e.bin+"/lever", "ps", "--json", "-c", cfgPath)
	ids := regexp.MustCompile(`"id":\s*"(r-[^"]+)"`).FindAllStringSubmatch(psOut, -1)
	if code != 0 || len(ids) != 2 {
		t.Fatalf("lever ps --json: exit %d, %d runs\n%s", code, len(ids), psOut)
	}
	logsOut, code := e.as(t, e.bin+"/lever", "logs", "-c", cfgPath, ids[0][1])
	resOut, rcode := e.as(t, e.bin+"/lever", "result", "-c", cfgPath, ids[1][1])
	if code != 0 || !strings.Contains(logsOut, "tool ") || rcode != 0 || !(strings.Contains(resOut, "42") || strings.Contains(resOut, "task done")) {
		t.Errorf("lever logs/result: exit %d/%d\n%s\n%s", code, rcode, logsOut, resOut)
	}
	// The key goes to grep on stdin (the key file), never on the exec's command line:
	// podman keeps exec sessions' argv in its state database, in the guest.
	shOut, code := e.as(t, "sh", "-c", `exec "$0" shell -c "$1" manager -- sh -c 'ls /; grep -rslF -f /dev/stdin /lever /tmp /etc /run /var /home 2>/dev/null; echo grep-ran' <"$2"`, e.bin+"/lever", cfgPath, e.dir+"/key")
	if code != 0 || !strings.Contains(shOut, "usr") || !strings.HasSuffix(strings.TrimSpace(shOut), "grep-ran") || strings.Contains(shOut, "/lever/") {
		t.Errorf("lever shell manager: exit %d (want the workbench's root and no file holding the key)\n%s", code, shOut)
	}
	// Control: the same stdin-fed grep finds what the tree does hold (stdin reaches it).
	ctlOut, _ := e.as(t, "sh", "-c", `printf 'hello\n' | "$0" shell -c "$1" manager -- sh -c 'grep -rslF -f /dev/stdin /lever 2>/dev/null; echo grep-ran'`, e.bin+"/lever", cfgPath)
	if !strings.Contains(ctlOut, "/lever/README.md") {
		t.Errorf("control: the stdin-fed grep did not find the tree's README.md:\n%s", ctlOut)
	}
	for i, a := range auths {
		if a != "Bearer "+key {
			t.Errorf("upstream request %d carried %q", i, a)
		}
	}
	acceptancePasses("after cold up and the agent's run (key nowhere in the guest)")
	if now := service(); now != svc {
		t.Errorf("the podman service changed during the run and acceptance: %q, was %q", now, svc)
	}

	// 3. warm: a second up changes nothing.
	out, code = e.lever(t, "up")
	if code != 0 || !strings.Contains(out, "nothing changed") {
		t.Fatalf("second up changed something or failed (exit %d)", code)
	}
	out, code = e.lever(t, "apply", "--json")
	res, err := resultOf(out)
	if err != nil || code != 0 {
		t.Fatalf("apply --json: exit %d\n%s", code, out)
	}
	if res.Changed {
		t.Errorf("warm apply changed something: %+v", res.Steps)
	}
	for _, st := range res.Steps {
		t.Logf("FIGURE warm step %-10s %6.0f ms %d guest calls changed=%v", st.ID, float64(st.Duration)/1e6, st.Calls, st.Changed)
	}
	t.Logf("FIGURE warm apply: %d guest calls in %s", res.GuestCalls, res.Duration)

	// 3b. warm-path containment drift on the real VM, each refused by the next up naming
	// it: a mount stacked over /lever in the guest (found by the check riding in the egress
	// snapshot), then a global override.yaml adding a host mount (limactl list --json).
	// Positive control: with both gone the warm apply passes at the same guest-call count.
	if o, c := e.guest(t, "sudo mount -t tmpfs lvtm-over /lever"); c != 0 {
		t.Fatalf("stacking a mount over /lever: %s", o)
	}
	out, code = e.lever(t, "up")
	if code == 0 || !strings.Contains(out, "containment drifted") || !strings.Contains(out, "2 mounts are stacked at /lever (fuse.sshfs, tmpfs)") {
		t.Errorf("warm up with a mount stacked over /lever: exit %d, want a refusal naming it", code)
	}
	if o, c := e.guest(t, "sudo umount /lever && findmnt -n -o FSTYPE /lever"); c != 0 || strings.TrimSpace(o) != "fuse.sshfs" {
		t.Fatalf("unstacking /lever: %s", o)
	}
	extra := e.home + "/extra"
	e.as(t, "mkdir", "-p", extra, e.home+"/.lima/_config")
	override := e.home + "/.lima/_config/override.yaml"
	e.as(t, "sh", "-c", "printf 'mounts:\n- location: "+extra+"\n  mountPoint: /extra\n' > "+override)
	out, code = e.lever(t, "up")
	if code == 0 || !strings.Contains(out, "realized config differs") || !strings.Contains(out, "mounts[1]: "+extra+" at /extra") {
		t.Errorf("warm up under an override.yaml adding a mount: exit %d, want a drift refusal naming it", code)
	}
	e.as(t, "rm", "-f", override)
	out, code = e.lever(t, "apply", "--json")
	res3, err := resultOf(out)
	if err != nil || code != 0 || res3.Changed || res3.GuestCalls != res.GuestCalls {
		t.Fatalf("warm apply after the drift was removed: exit %d, changed %v, %d guest calls (want %d)\n%s", code, res3.Changed, res3.GuestCalls, res.GuestCalls, out)
	}
	t.Logf("FIGURE warm apply after drift removed: %d guest calls in %s", res3.GuestCalls, res3.Duration)

	// 3c. a restart (lever stop, then up): the guest's disk keeps lev's installed copy and
	// both trees, so nothing is sent or made again (the same inodes: an install renames a
	// new file into place, a tree is renamed in whole); the egress chains, which do not
	// survive a boot, are rebuilt, and the lev containers run again.
	kept := `sudo sh -c 'stat -c "%n %i" /var/lib/lever/bin/lev-* /var/lib/lever/*/trees/*'`
	before, c := e.guest(t, kept)
	if c != 0 || strings.Count(before, "\n") < 3 {
		t.Fatalf("lev's copy and the trees before the restart: exit %d\n%s", c, before)
	}
	if out, code := e.lever(t, "stop"); code != 0 {
		t.Fatalf("stop: exit %d %s", code, out)
	}
	e.logTrace(t, "stop")
	out, code = e.lever(t, "apply", "--json")
	trace = e.logTrace(t, "restart")
	res4, err := resultOf(out)
	if err != nil || code != 0 || !res4.Changed {
		t.Fatalf("apply after stop: exit %d, changed %v\n%s", code, res4.Changed, out)
	}
	var jail time.Duration
	seen := map[string]bool{}
	for _, st := range res4.Steps {
		seen[st.ID] = true
		t.Logf("FIGURE restart step %-10s %6.0f ms %d guest calls changed=%v: %s", st.ID, float64(st.Duration)/1e6, st.Calls, st.Changed, st.Detail)
		switch st.ID {
		case bringup.StepJail:
			if st.Detail != "guest started" {
				t.Errorf("restart: jail step %q, want the guest started", st.Detail)
			}
			jail = st.Duration
		case bringup.StepEgress:
			if !st.Changed {
				t.Errorf("restart: the egress chains were not rebuilt after the boot: %s", st.Detail)
			}
		case bringup.StepImage:
			// asked for both (the guest was down when observed), the helper finds them whole
			if st.Changed || !bothTreesPresent.MatchString(st.Detail) {
				t.Errorf("restart: the image step %q (changed %v), want both trees found present", st.Detail, st.Changed)
			}
		}
	}
	for _, id := range []string{bringup.StepJail, bringup.StepEgress, bringup.StepImage, bringup.StepLev} {
		if !seen[id] {
			t.Errorf("restart: no %s step in the result", id)
		}
	}
	// the steps after the jail step overlap: their wall time, not their sum (the call
	// after the boot is the jail step's: the trace has it)
	t.Logf("FIGURE restart: %d guest calls in %s, after the jail step %s", res4.GuestCalls, res4.Duration, res4.Duration-jail)
	if d, ok := afterBoot(trace, res4.Duration); ok {
		t.Logf("FIGURE restart: from the call after the boot to the last step's end %s", d.Round(10*time.Millisecond))
	}
	if now, c := e.guest(t, kept); c != 0 || now != before {
		t.Errorf("the restart sent lev or made a tree again (exit %d):\nbefore:\n%s\nafter:\n%s", c, before, now)
	}
	if out, code := e.lever(t, "status"); code != 0 || !strings.Contains(out, "lever-"+name+"-manager running") || !strings.Contains(out, "lever-"+name+"-manager-bench running") {
		t.Errorf("status after the restart: exit %d, want both lev containers running", code)
	}

	// 4. destroy leaves nothing: no VM, no instance dir, no state, no process of the owner.
	if out, code := e.lever(t, "destroy"); code != 0 {
		t.Fatalf("destroy: exit %d %s", code, out)
	}
	if out, _ := e.as(t, "limactl", "list", "--format", "{{.Name}}"); strings.Contains(out, e.vm) {
		t.Errorf("destroy left the VM: %s", out)
	}
	for _, p := range []string{e.home + "/.lima/" + e.vm, e.home + "/.local/state/lever/" + name} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("destroy left %s", p)
		}
	}
	var left string
	for i := 0; i < 30; i++ {
		o, _ := exec.Command("pgrep", "-a", "-u", strconv.Itoa(e.uid)).Output()
		if left = strings.TrimSpace(string(o)); left == "" {
			break
		}
		time.Sleep(time.Second)
	}
	if left != "" {
		t.Errorf("destroy left processes of %s:\n%s", e.user, left)
	}
	t.Logf("TIMING whole test: %.1fs", time.Since(t0).Seconds())
}

func readAuths(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, err := strconv.Unquote(sc.Text())
		if err != nil {
			t.Fatalf("upstream log: %v", err)
		}
		out = append(out, v)
	}
	return out
}

// TestAfterBoot reads the figure the docs quote from traces shaped as lever writes them
// (a cold up's from this machine, a warm up's, one the guest never answered, none).
func TestAfterBoot(t *testing.T) {
	cold := `guest call 1: at +0.00s took 0.04s as root error: env LEVER_TREES=… sh -s -- /var/lib/lever/provision.stamp (stdin 9742 B, stdout 0 B)
guest call 2: at +97.57s took 1.69s as root rc=0: env LEVER_IPT=… sh -s -- (stdin 6509 B, stdout 3930 B)
guest call 3: at +99.26s took 3.31s as root rc=0: env LEVER_IPT=… sh -s -- (stdin 6892 B, stdout 19527 B)
`
	warm := "guest call 1: at +0.00s took 3.90s as root rc=0: env LEVER_TREES=… sh -s -- (stdin 9742 B, stdout 17200 B)\n"
	for _, tc := range []struct {
		name  string
		trace string
		total time.Duration
		want  time.Duration
		ok    bool
	}{
		{"cold", cold, 119440 * time.Millisecond, 21870 * time.Millisecond, true},
		{"warm: the guest answered the first call", warm, 4 * time.Second, 0, false},
		{"the guest never answered", "guest call 1: at +0.00s took 0.01s as root error: x\n", time.Second, 0, false},
		{"no trace", "", time.Second, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := afterBoot(tc.trace, tc.total)
			if ok != tc.ok || (ok && (got-tc.want).Abs() > time.Millisecond) {
				t.Errorf("afterBoot = %s, %v; want %s, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
