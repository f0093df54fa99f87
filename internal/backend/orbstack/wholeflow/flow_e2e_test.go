//go:build e2e && linux

package wholeflow

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/acceptance"
	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/backend/orbstack"
	"github.com/lever-jail/lever/internal/cli"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/whole-flow.golden from this run")

// asLever makes this binary lever when bring-up starts it as the broker child.
const asLever = "LEVER_TEST_AS_LEVER"

func TestMain(m *testing.M) {
	switch os.Getenv(fakeEnv) {
	case "orb":
		os.Exit(fakeOrb(os.Args[1:]))
	case "ssh":
		os.Exit(fakeSSH(os.Args[1:]))
	case "master":
		os.Exit(sshMaster())
	case "init":
		os.Exit(substrateInit())
	case "world":
		os.Exit(worldListen())
	}
	// In the machine, lever's guest helpers run as `<binary> acceptance __guest` with only
	// the helper's switch in a clean environment.
	if len(os.Args) > 2 && os.Args[1] == "acceptance" && os.Args[2] == "__guest" || os.Getenv(asLever) == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

const (
	instance = "orbflow"
	mach     = "lever-" + instance
	nsPrefix = "lvof"
	// the world: addresses standing for the LAN, the internet, a resolver, the metadata
	// service and its link-local neighbour, in a namespace this test makes
	lanAddr      = "192.168.77.10:80"
	internetAddr = "198.51.100.10:443"
	dnsAddr      = "198.51.100.53:53"
	linkLocal    = "169.254.169.253:80"
	metadata     = "169.254.169.254:80"
)

func sh(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestOrbStackWholeFlow runs `lever up`, `up` again, `status`, `acceptance`, `stop` and
// `destroy` with backend orbstack through lever's command path (cli.Main), with `orb`
// and `ssh` on PATH being fakes that check the exact argv of every call:
//
//   - orb's own commands (version, list, create, start, stop, delete) are answered from
//     OrbStack's recorded record format, kept in a state file;
//   - guest commands (`orb -u USER -m lever-orbflow -w / ARGV...`) run for real in a
//     guest substrate this test makes: a network namespace (the netns backend's, with its
//     veth and alias addresses), a pid namespace and a mount namespace with its own /etc
//     (no run user until provisioning makes one), /home, /run/user, /var/lib/lever and the
//     tree at /lever, and the host's /tmp, /root, /work and /opt hidden. Provisioning,
//     iptables, rootless podman and lev run there for real;
//   - ssh plays OpenSSH's ControlMaster: `-O forward -L host.sock:guest.sock` makes a 0600
//     host socket carried to the run user's real podman socket in the substrate.
//
// Every call is logged; each command's calls are compared with testdata/whole-flow.golden
// (paths, ports, uid and helper sizes normalised; long scripts by digest). Attacks in the
// same run: a smuggled orb argv and an ssh call of another shape are refused by the fakes
// (the positive controls are the flow's own calls, accepted).
func TestOrbStackWholeFlow(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"podman", "iptables", "nsenter", "unshare", "runuser", "useradd"} {
		testutil.RequireTool(t, tool)
	}
	ctx := context.Background()
	self, _ := os.Executable()
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "src"), 0o777)
	os.Chmod(tree, 0o777)
	os.WriteFile(filepath.Join(tree, "README"), []byte("the tree\n"), 0o644)
	state := filepath.Join(dir, "state")
	home := filepath.Join(dir, "mac-home")
	bin := filepath.Join(dir, "bin")
	sub := filepath.Join(dir, "machine")
	for _, d := range []string{state, bin, filepath.Join(home, ".orbstack", "ssh"), filepath.Join(sub, "home"), filepath.Join(sub, "varlib")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// OrbStack's generated ssh config (its shape: a `Host orb` on localhost:32222 with
	// OrbStack's key); the fake ssh reads nothing from it but that it exists.
	os.WriteFile(filepath.Join(home, ".orbstack", "ssh", "config"), []byte("Host orb\n  Hostname 127.0.0.1\n  Port 32222\n  IdentityFile ~/.orbstack/ssh/id_ed25519\n"), 0o644)
	for _, tool := range []string{"orb", "ssh"} {
		script := fmt.Sprintf("#!/bin/sh\n%s=%s exec '%s' \"$@\"\n", fakeEnv, tool, self)
		if err := os.WriteFile(filepath.Join(bin, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The key lives outside the tree and under /tmp, which the machine does not see.
	secretDir := filepath.Join(dir, "secret")
	os.MkdirAll(secretDir, 0o700)
	rb := make([]byte, 8)
	f, _ := os.Open("/dev/urandom")
	f.Read(rb)
	f.Close()
	key := "sk-lvof-" + hex.EncodeToString(rb)
	keyFile := filepath.Join(secretDir, "api-key")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","model":"test-model","choices":[{"index":0,"message":{"role":"assistant","content":"42"},"finish_reason":"stop"}]}`)
	}))
	defer srv.Close()
	agents := filepath.Join(dir, "lev-agents")
	os.MkdirAll(agents, 0o755)
	os.WriteFile(filepath.Join(agents, "answer.toml"), []byte("name = \"answer\"\nversion = \"1\"\n[stages.answer]\ntools = [\"submit_output\"]\n"), 0o644)
	jailPort, adminPort, allowPort := freePort(t), freePort(t), freePort(t)
	// A host service on the Mac's loopback the manager may reach (manager.allow_ports).
	allowL, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(allowPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer allowL.Close()
	go func() {
		for {
			c, err := allowL.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	cfgPath := filepath.Join(dir, "lever.yaml")
	y := testutil.NetnsYAML(instance, keyFile, srv.URL, jailPort, adminPort)
	y.Backend = "orbstack"
	y.ManagerPorts = []int{allowPort}
	y.Lev.Agents = agents
	y.Write(t, cfgPath)

	// The substrate's network: the netns backend's namespace and veth; the machine resolves
	// host.orb.internal to the veth's host side, where the broker listens.
	nb, err := netns.New(netns.Options{Name: instance, Prefix: nsPrefix, RunUser: "lever"})
	if err != nil {
		t.Fatal(err)
	}
	nb.Destroy(ctx) // a previous run's leftovers
	if err := nb.EnsureUp(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nb.Destroy(context.Background()) })
	hv4, hv6 := nb.HostAddrs()
	// The machine's /etc: the host's, without a run user (provisioning makes it), with the
	// alias and no resolver.
	sh(t, "cp", "-a", "/etc", filepath.Join(sub, "etc"))
	etc := filepath.Join(sub, "etc")
	for _, db := range []string{"passwd", "shadow", "group", "gshadow", "subuid", "subgid"} {
		p := filepath.Join(etc, db)
		if b, err := os.ReadFile(p); err == nil {
			var keep []string
			for _, l := range strings.SplitAfter(string(b), "\n") {
				if !strings.HasPrefix(l, "lever:") {
					keep = append(keep, l)
				}
			}
			// an existing file keeps its mode (cp -a copied it)
			os.WriteFile(p, []byte(strings.Join(keep, "")), 0o600)
		}
	}
	// Its users get ids far from the host's, so that nothing keyed by uid on the shared
	// kernel (a bring-up test's run user in another package, running alongside) is shared.
	if b, err := os.ReadFile(filepath.Join(etc, "login.defs")); err == nil {
		defs := regexp.MustCompile(`(?m)^(UID_MIN|GID_MIN)\s+\d+`).ReplaceAllString(string(b), "$1 47000")
		os.WriteFile(filepath.Join(etc, "login.defs"), []byte(defs), 0o644)
	}
	os.WriteFile(filepath.Join(etc, "hosts"), []byte(fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost\n%s\thost.orb.internal\n%s\thost.orb.internal\n", hv4, hv6)), 0o644)
	os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("# no resolver\n"), 0o644)
	for _, mp := range []string{"/lever", "/var/lib/lever", "/run/user"} {
		if _, err := os.Stat(mp); os.IsNotExist(err) {
			os.MkdirAll(mp, 0o755)
			t.Cleanup(func() { os.Remove(mp) })
		}
	}
	ucmd := exec.Command("unshare", "--pid", "--fork", "--mount", "--propagation", "private", "--mount-proc", self)
	ucmd.Env = append(os.Environ(), fakeEnv+"=init", envRoot+"="+sub, envTree+"="+tree)
	ucmd.Env = dropEnv(ucmd.Env, asLever)
	uout, _ := ucmd.StdoutPipe()
	ucmd.Stderr = os.Stderr
	if err := ucmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ucmd.Process.Kill(); ucmd.Wait() })
	if line, _ := bufio.NewReader(uout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("substrate init: %q", line)
	}
	holder := childOf(t, ucmd.Process.Pid)
	t.Cleanup(func() { syscall.Kill(holder, syscall.SIGKILL) })

	logPath := filepath.Join(dir, "calls.jsonl")
	statePath := filepath.Join(dir, "machine.json")
	machine{Arch: "amd64"}.save2(statePath)
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Setenv("HOME", home)
	t.Setenv("LEVER_STATE_DIR", state)
	t.Setenv("LEVER_LEV_BINARY", levBinary(t))
	t.Setenv(asLever, "1")
	t.Setenv(envState, statePath)
	t.Setenv(envLog, logPath)
	t.Setenv(envHolder, strconv.Itoa(holder))
	t.Setenv(envNetns, nb.Namespace())
	t.Setenv(envMachine, mach)
	t.Setenv(envTree, tree)
	t.Setenv(envStateD, filepath.Join(state, instance))
	t.Cleanup(func() {
		leverRun("destroy", "-c", cfgPath)
		if b, err := os.ReadFile(filepath.Join(state, instance, "fake-master.pid")); err == nil {
			if pid, _ := strconv.Atoi(string(b)); pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})

	// host.orb.internal reaches the Mac's loopback through OrbStack's forwarding: here the
	// alias addresses forward the broker's two ports to 127.0.0.1, where lever's broker
	// listens for an OrbStack jail.
	for _, a := range []string{hv4.String(), hv6.String()} {
		for _, p := range []int{jailPort, adminPort, allowPort} {
			loopbackForward(t, net.JoinHostPort(a, strconv.Itoa(p)), net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		}
	}

	// The world the acceptance probes aim at, wired to the machine's namespace.
	wireWorld(t, nb.Namespace(), self)

	golden := readGolden(t)
	got := map[string][]string{}
	var order []string
	norm := &normaliser{pairs: [][2]string{
		{filepath.Join(state, instance), "{state}"}, {tree, "{tree}"}, {home, "{home}"},
		{strconv.Itoa(jailPort), "{jail-port}"}, {strconv.Itoa(adminPort), "{admin-port}"}, {strconv.Itoa(allowPort), "{allow-port}"},
		{hv4.String(), "{alias4}"}, {hv6.String(), "{alias6}"},
	}}
	step := func(label string, wantCode int, args ...string) string {
		t.Helper()
		os.Remove(logPath)
		start := time.Now()
		code, out := leverRun(args...)
		t.Logf("lever %s: exit %d in %s\n%s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond), out)
		calls := readCalls(t, logPath)
		var lines []string
		for _, c := range calls {
			if c.Refused != "" {
				t.Errorf("%s: the fake refused %s %q: %s", label, c.Tool, c.Argv, c.Refused)
			}
			lines = append(lines, norm.line(c))
		}
		lines = overlapSorted(lines)
		got[label], order = lines, append(order, label)
		if !*update {
			if diff := cmp.Diff(overlapSorted(golden[label]), lines); diff != "" {
				t.Errorf("%s: calls differ from testdata/whole-flow.golden (-recorded +made):\n%s", label, diff)
			}
		}
		if code != wantCode {
			t.Fatalf("lever %s: exit %d, want %d", strings.Join(args, " "), code, wantCode)
		}
		return out
	}

	// 1. up from nothing: create, bootstrap, firewall, provisioning, broker, enrolment, the
	// podman socket forward, images, lev.
	out := step("up", 0, "up", "-c", cfgPath)
	if !strings.Contains(out, mach+"-manager running") && !strings.Contains(out, "lever-"+instance+"-manager running") {
		t.Errorf("up did not start the manager:\n%s", out)
	}
	// The forward: a 0600 socket in the state dir, answering podman's API.
	sock := filepath.Join(state, instance, "podman.sock")
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("host podman socket %s: %v %v, want a 0600 socket", sock, fi.Mode(), err)
	}
	if ping, err := podmanPing(sock); err != nil || ping != "OK" {
		t.Errorf("podman _ping through the forward: %v %q", err, ping)
	}

	// 2. up again: nothing changes, the master is asked again for the forward it holds.
	step("up again", 0, "up", "-c", cfgPath)
	// 3. status
	step("status", 0, "status", "-c", cfgPath)
	// 4. acceptance, from inside the machine.
	out = step("acceptance", 1, "acceptance", "--json", "--lan", lanAddr, "--internet", internetAddr, "--dns", dnsAddr, "--link-local", linkLocal, "--metadata", metadata, "-c", cfgPath)
	var rep acceptance.Report
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &rep); err != nil {
		t.Fatalf("acceptance JSON: %v", err)
	}
	for _, r := range rep.Results {
		want := acceptance.Pass
		if r.ID == "container-limits" {
			// This host has hybrid cgroups (v1 controllers): rootless podman cannot apply
			// pids/memory limits, and outside the netns dev substrate that is a failure.
			want = acceptance.Fail
			if !strings.Contains(r.Detail, "cgroup v1") {
				t.Errorf("container-limits failed for another reason: %s", r.Detail)
			}
		}
		if r.Status != want {
			t.Errorf("acceptance %s is %s, want %s: %s", r.ID, r.Status, want, r.Detail)
		}
	}
	{
		ml, _ := os.ReadFile(logPath + ".master")
		svc, _ := exec.Command("nsenter", "--target", strconv.Itoa(holder), "--mount", "--", "sh", "-c", "tail -20 /run/user/*/podman/lever-service.log").CombinedOutput()
		t.Logf("forward log:\n%s\npodman service log:\n%s", ml, svc)
	}
	if len(rep.Results) < 12 {
		t.Errorf("acceptance ran %d checks", len(rep.Results))
	}
	// 5. stop: the ssh master ends, its socket goes, the machine is stopped, host state stays.
	step("stop", 0, "stop", "-c", cfgPath)
	for _, p := range []string{sock, filepath.Join(state, instance, "orb-ssh.ctl")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("after stop %s still exists", p)
		}
	}
	if m := loadMachineAt(statePath); !m.Exists || m.Running {
		t.Errorf("after stop the machine is %+v", m)
	}
	// 6. destroy: the machine is deleted and the state dir removed.
	step("destroy", 0, "destroy", "-c", cfgPath)
	if m := loadMachineAt(statePath); m.Exists {
		t.Errorf("after destroy the machine exists")
	}
	if _, err := os.Stat(filepath.Join(state, instance)); err == nil {
		t.Errorf("after destroy the state dir is still there")
	}

	// 7. An arm64 machine: orb reports it, lever reads it without a guest call, and the
	// helper it pipes in is checked by the fake against the machine's architecture.
	machine{Arch: "arm64"}.save2(statePath)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	be, err := backend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(logPath)
	if err := be.EnsureUp(ctx); err != nil {
		t.Fatal(err)
	}
	arch, err := be.(*orbstack.Backend).GuestArch(ctx)
	if err != nil || arch != "arm64" {
		t.Errorf("GuestArch of the arm64 machine = %q, %v", arch, err)
	}
	// The host's lev (x86-64 here) is refused for the arm64 machine before anything is
	// piped in; that is the control for the next up, which is given the arm64 lev.
	step("up arm64 with the host's lev", 2, "up", "-c", cfgPath)
	for _, c := range readCalls(t, logPath) {
		if c.HelperELF != "" {
			t.Errorf("a helper (%s) was piped into the arm64 machine with only the host's lev at hand", c.HelperELF)
		}
	}
	t.Setenv("LEVER_LEV_BINARY", levBinaryFor(t, "arm64"))
	step("up arm64", 2, "up", "-c", cfgPath)
	var helper string
	for _, c := range readCalls(t, logPath) {
		if c.HelperELF != "" {
			helper = c.HelperELF
		}
	}
	// The helper piped into this machine is the linux/arm64 lev that bring-up chose through
	// backend.ArchReporter (the fake answers it as the arm64 kernel would; this substrate
	// is x86-64, so the up ends there, after the choice this test is about).
	t.Logf("helper piped into the arm64 machine: %s", helper)
	if helper != "aarch64" {
		t.Errorf("the helper piped into the arm64 machine is %q, want aarch64", helper)
	}
	t.Setenv("LEVER_LEV_BINARY", levBinary(t))
	step("destroy arm64", 0, "destroy", "-c", cfgPath)

	// Attacks on the fakes' checks, through the same PATH lever uses; their positive
	// controls are every call above, accepted.
	for _, a := range []struct {
		tool string
		argv []string
	}{
		{"orb", []string{"create", "--arch", runtime.GOARCH, "--isolated", "--mount", tree + ":/lever", "--mount", "/Users:/mnt/users", "debian:bookworm", mach}},
		{"orb", []string{"-u", "root", "-m", "lever-other", "-w", "/", "id"}},
		{"ssh", []string{"-F", filepath.Join(home, ".orbstack", "ssh", "config"), "-o", "LogLevel=ERROR", "-o", "ControlPath=" + filepath.Join(state, instance, "orb-ssh.ctl"), "-o", "ForwardAgent=yes", "-O", "check", "lever@" + mach + "@orb"}},
	} {
		if out, err := exec.Command(a.tool, a.argv...).CombinedOutput(); err == nil || !strings.Contains(string(out), "refused") {
			t.Errorf("fake %s accepted %q: %v %s", a.tool, a.argv, err, out)
		}
	}

	if *update {
		writeGolden(t, order, got)
	}
}

// podmanPing asks the podman API behind a unix socket for _ping.
func podmanPing(sock string) (string, error) {
	c := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://d/v4.0.0/libpod/_ping")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return b.String(), nil
}

// loopbackForward carries TCP connections to from to loopback target, as OrbStack's
// host.orb.internal does to the Mac's loopback.
func loopbackForward(t *testing.T, from, to string) {
	t.Helper()
	l, err := net.Listen("tcp", from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer u.Close()
				go io.Copy(u, c)
				io.Copy(c, u)
			}()
		}
	}()
}

// leverRun runs lever in process, stdout and stderr together.
func leverRun(args ...string) (int, string) {
	if len(args) > 0 && (args[0] == "up" || args[0] == "apply") {
		// The test's config is the person's own: its grants are confirmed as a script does.
		args = append([]string{args[0], "--yes"}, args[1:]...)
	}
	var out bytes.Buffer
	code := cli.Main(args, &out, &out)
	return code, out.String()
}

func (m machine) save2(p string) { b, _ := json.Marshal(m); os.WriteFile(p, b, 0o644) }

func loadMachineAt(p string) machine {
	var m machine
	b, _ := os.ReadFile(p)
	json.Unmarshal(b, &m)
	return m
}

func dropEnv(env []string, key string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, key+"=") {
			out = append(out, e)
		}
	}
	return out
}

// childOf is the single child of pid (unshare --fork's child: the substrate's init).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(b)); len(f) == 1 {
			c, _ := strconv.Atoi(f[0])
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no substrate init under unshare %d", pid)
	return 0
}

func readCalls(t *testing.T, p string) []call {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	var out []call
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var c call
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatalf("call log: %v: %q", err, l)
		}
		out = append(out, c)
	}
	return out
}

// normaliser turns a call into its golden line: the run's paths, ports and addresses by
// name, the size of a piped helper as {size}, lev's digest as {lev-digest}, and any word longer than 100 bytes or with
// a newline as its length and digest (the scripts are lever's own constants).
type normaliser struct{ pairs [][2]string }

func (n *normaliser) word(w string) string {
	for _, p := range n.pairs {
		w = strings.ReplaceAll(w, p[0], p[1])
	}
	w = headC.ReplaceAllString(w, "head -c {size} ")
	w = runUser.ReplaceAllString(w, "/run/user/{uid}/")
	// The remembered round-trip key is a digest of what this host's iptables printed,
	// not something lever chose: only whether one is sent belongs in the golden.
	w = rtKey.ReplaceAllString(w, "LEVER_RTKEY={rtkey}")
	// lever's lev installed in the machine is named (and checked) by its digest: the lev
	// this run built, not something the golden can hold
	w = levDigest.ReplaceAllString(w, "{lev-digest}")
	if len(w) > 100 || strings.Contains(w, "\n") {
		sum := sha256.Sum256([]byte(w))
		return fmt.Sprintf("<%d bytes sha256:%s>", len(w), hex.EncodeToString(sum[:6]))
	}
	if strings.ContainsAny(w, " '") || w == "" {
		return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return w
}

func (n *normaliser) line(c call) string {
	var ws []string
	for _, a := range c.Argv {
		ws = append(ws, n.word(a))
	}
	l := c.Tool + " " + strings.Join(ws, " ")
	if c.HelperELF != "" {
		l += "    # helper piped in: ELF " + c.HelperELF
	}
	if n := len(c.Argv); n > 0 && strings.Contains(c.Argv[n-1], "no cached lev") && strings.HasSuffix(c.Argv[n-1], "exit 0") {
		l += "    # helper look"
	}
	return l
}

// floats says whether a golden line is lev's install or the look before it: both run
// beside the steps after egress, so they land anywhere in that stretch.
func floats(l string) bool {
	return strings.Contains(l, "# helper piped in") || strings.Contains(l, "# helper look")
}

var (
	runUser   = regexp.MustCompile(`/run/user/[0-9]+/`)
	levDigest = regexp.MustCompile(`\b[0-9a-f]{64}\b|\blev-[0-9a-f]{32}\b`)
	rtKey     = regexp.MustCompile(`LEVER_RTKEY=[0-9a-f]{64}`)
)

const goldenPath = "testdata/whole-flow.golden"

// overlapSorted sorts the calls made while bring-up's steps run beside each other
// (bringup.Step.Overlap): from the end of provisioning (or, when it was skipped, of the
// egress step) to the next observation, the podman step's calls, the enrol helper and the
// image step's calls interleave by timing. lev's install (and, on a guest that was down,
// the look before it) starts after the egress step and runs beside provisioning, so
// wherever it lands before that window it is taken into it. Everything else before the
// window (the firewall first, then provisioning) and after it keeps its order.
func overlapSorted(lines []string) []string {
	var out, installs []string
	start := -1
	for i, l := range lines {
		if start < 0 && floats(l) {
			installs = append(installs, l)
			continue
		}
		out = append(out, l)
		if start >= 0 {
			continue
		}
		switch {
		case strings.Contains(l, " LEVER_RUN_USER="):
			start = len(out)
		case strings.Contains(l, " LEVER_IPT=") && !strings.Contains(l, " LEVER_TREES="):
			// an egress call: the window starts after the last one (when no provisioning
			// follows, the installs aside)
			next := ""
			for _, m := range lines[i+1:] {
				if !floats(m) {
					next = m
					break
				}
			}
			if !strings.Contains(next, " LEVER_IPT=") && !strings.Contains(next, " LEVER_RUN_USER=") {
				start = len(out)
			}
		}
	}
	if start < 0 {
		return append(out, installs...)
	}
	out = append(out[:start], append(installs, out[start:]...)...)
	for i := start; i < len(out); i++ {
		if strings.Contains(out[i], " LEVER_TREES=") {
			sort.Strings(out[start:i])
			return out
		}
	}
	sort.Strings(out[start:])
	return out
}

func readGolden(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(goldenPath)
	if err != nil {
		if *update {
			return nil
		}
		t.Fatalf("%v (run with -update to record)", err)
	}
	out := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "## lever "):
			cur = strings.TrimPrefix(l, "## lever ")
			out[cur] = nil
		case l == "" || strings.HasPrefix(l, "#"):
		default:
			out[cur] = append(out[cur], l)
		}
	}
	return out
}

func writeGolden(t *testing.T, order []string, got map[string][]string) {
	var b strings.Builder
	b.WriteString(`# Every orb and ssh call lever makes in TestOrbStackWholeFlow, in order, per command.
# Recorded from a run (go test -tags e2e,... -run TestOrbStackWholeFlow -update) and
# reviewed: paths, ports, the alias addresses and the run user's uid are named; a word
# over 100 bytes (lever's scripts) is its length and sha256 prefix; a helper binary's
# size is {size}. A change in any call's argv, or a call added or missing, fails the test.
`)
	for _, k := range order {
		fmt.Fprintf(&b, "\n## lever %s\n", k)
		for _, l := range got[k] {
			b.WriteString(l + "\n")
		}
	}
	if err := os.WriteFile(goldenPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// levBinary builds lev for the jail: the bring-up e2e tests' lev (the real lev CLI plus
// their test-only bridges, internal/bringup/testdata/levstub).
func levBinary(t *testing.T) string {
	t.Helper()
	levOnce.Do(func() {
		d, err := os.MkdirTemp("", "lvof-lev")
		if err != nil {
			levErr = err
			return
		}
		levPath = filepath.Join(d, "lev")
		cmd := exec.Command("go", "build", "-o", levPath, "./internal/bringup/testdata/levstub")
		cmd.Dir = "../../../.."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			levErr = fmt.Errorf("building lev: %v: %s", err, b)
		}
	})
	if levErr != nil {
		t.Fatal(levErr)
	}
	return levPath
}

// levBinaryFor builds the same lev for another Linux architecture.
func levBinaryFor(t *testing.T, arch string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "lev-linux-"+arch)
	cmd := exec.Command("go", "build", "-o", out, "./internal/bringup/testdata/levstub")
	cmd.Dir = "../../../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building lev for linux/%s: %v: %s", arch, err, b)
	}
	return out
}

var (
	levOnce sync.Once
	levPath string
	levErr  error
)

// wireWorld makes a namespace standing for everything outside the machine, joined to the
// machine's namespace by a veth with routes for the world's ranges only, and listening on
// every target so that a leak shows as a connection.
func wireWorld(t *testing.T, guestNS, self string) {
	t.Helper()
	w := nsPrefix + "w"
	exec.Command("ip", "netns", "del", w).Run()
	sh(t, "ip", "netns", "add", w)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", w).Run() })
	gv, wv := nsPrefix+"g0", nsPrefix+"x0"
	sh(t, "ip", "link", "add", gv, "netns", guestNS, "type", "veth", "peer", "name", wv, "netns", w)
	sh(t, "ip", "-n", w, "link", "set", "lo", "up")
	sh(t, "ip", "-n", w, "link", "set", wv, "up")
	for _, a := range []string{"192.168.77.10/24", "198.51.100.10/24", "198.51.100.53/24", "169.254.169.253/16", "169.254.169.254/16"} {
		sh(t, "ip", "-n", w, "addr", "add", a, "dev", wv)
	}
	sh(t, "ip", "-n", guestNS, "addr", "add", "192.168.77.2/24", "dev", gv)
	sh(t, "ip", "-n", guestNS, "link", "set", gv, "up")
	for _, r := range []string{"169.254.0.0/16", "198.51.100.0/24"} {
		sh(t, "ip", "-n", guestNS, "route", "add", r, "dev", gv)
	}
	cmd := exec.Command("ip", "netns", "exec", w, self)
	cmd.Env = append(dropEnv(os.Environ(), asLever), fakeEnv+"=world")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; i < 100; i++ {
		if exec.Command("ip", "netns", "exec", w, "bash", "-c", "exec 3<>/dev/tcp/192.168.77.10/80").Run() == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("world listener did not come up")
}

// worldListen accepts on every TCP target and echoes UDP on the resolver.
func worldListen() int {
	for _, a := range []string{lanAddr, internetAddr, linkLocal, metadata} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	u, err := net.ListenPacket("udp", dnsAddr)
	if err != nil {
		return 1
	}
	buf := make([]byte, 512)
	for {
		n, from, err := u.ReadFrom(buf)
		if err != nil {
			return 1
		}
		u.WriteTo(buf[:n], from)
	}
}
