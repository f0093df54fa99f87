//go:build e2e

package bringup_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/acceptance"
	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/cli"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/testutil"
)

// asLever makes this test binary behave as lever when it is started as the broker child
// or a guest helper (bring-up runs os.Executable()).
const asLever = "LEVER_TEST_AS_LEVER"

func TestMain(m *testing.M) {
	if os.Getenv(asLever) == "1" {
		os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func sh(t *testing.T, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// levBinary is lev for the jail: the real lev CLI built with the test-only bridges of
// testdata/levstub (each steps aside once this branch's lev does the job itself).
func levBinary(t *testing.T) string {
	t.Helper()
	levStubOnce.Do(func() {
		dir, err := os.MkdirTemp("", "levstub")
		if err != nil {
			levStubErr = err
			return
		}
		out := filepath.Join(dir, "lev")
		cmd := exec.Command("go", "build", "-o", out, "./testdata/levstub")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			levStubErr = fmt.Errorf("building lev: %v: %s", err, b)
			return
		}
		levStubPath = out
	})
	if levStubErr != nil {
		t.Fatal(levStubErr)
	}
	return levStubPath
}

var (
	levStubOnce sync.Once
	levStubPath string
	levStubErr  error
)

// world is a namespace the test made, standing for everything outside the jail: the LAN,
// the metadata service's neighbour, the public internet and a public resolver. It listens
// on each target, so a leak shows up as a connection, not as silence.
type world struct {
	ns     string
	guest  string
	stopFn []func()
}

const (
	lanAddr      = "192.168.77.10:80"
	internetAddr = "198.51.100.10:443"
	dnsAddr      = "198.51.100.53:53"
	linkLocal    = "169.254.169.253:80"
	metadata     = "169.254.169.254:80"
)

func newWorld(t *testing.T, suffix string) *world {
	w := &world{ns: "lvtbw" + suffix}
	sh(t, "ip", "netns", "add", w.ns)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "pids", w.ns).Run()
		if out, err := exec.Command("ip", "netns", "pids", w.ns).Output(); err == nil {
			for _, p := range strings.Fields(string(out)) {
				exec.Command("kill", "-9", p).Run()
			}
		}
		exec.Command("ip", "netns", "del", w.ns).Run()
	})
	sh(t, "ip", "-n", w.ns, "link", "set", "lo", "up")
	// Listeners: a tiny TCP/UDP responder inside the world namespace, run by this binary
	// via `ip netns exec` and python-free: socat is not assumed, so use busybox nc if
	// present, else the test's own helper.
	return w
}

// wire connects the world to the guest namespace with a veth pair and routes for every
// target range (the guest has no default route of its own).
func (w *world) wire(t *testing.T, guestNS string) {
	t.Helper()
	w.guest = guestNS
	gv, wv := "lvtbg"+w.ns[5:], "lvtbx"+w.ns[5:]
	exec.Command("ip", "-n", guestNS, "link", "del", gv).Run()
	sh(t, "ip", "link", "add", gv, "netns", guestNS, "type", "veth", "peer", "name", wv, "netns", w.ns)
	sh(t, "ip", "-n", w.ns, "link", "set", wv, "up")
	for _, a := range []string{"192.168.77.10/24", "198.51.100.10/24", "198.51.100.53/24", "169.254.169.253/16", "169.254.169.254/16"} {
		sh(t, "ip", "-n", w.ns, "addr", "add", a, "dev", wv)
	}
	sh(t, "ip", "-n", guestNS, "addr", "add", "192.168.77.2/24", "dev", gv)
	sh(t, "ip", "-n", guestNS, "link", "set", gv, "up")
	for _, r := range []string{"169.254.0.0/16", "198.51.100.0/24"} {
		sh(t, "ip", "-n", guestNS, "route", "add", r, "dev", gv)
	}
	w.listen(t)
}

// listen starts TCP listeners on every TCP target and a UDP echo on the resolver, inside
// the world namespace, by re-running this binary there as a listener.
func (w *world) listen(t *testing.T) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", w.ns, os.Args[0], "-test.run=^TestWorldListener$")
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, asLever+"=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, "LEVER_TEST_WORLD=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range w.stopFn {
		f()
	}
	w.stopFn = []func(){func() { cmd.Process.Kill(); cmd.Wait() }}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// wait until the listener answers inside the world namespace
	for i := 0; i < 100; i++ {
		if exec.Command("ip", "netns", "exec", w.ns, "bash", "-c", "exec 3<>/dev/tcp/192.168.77.10/80").Run() == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("world listener did not come up: %s", out.String())
}

// TestWorldListener is not a test: it is the world namespace's listener process.
func TestWorldListener(t *testing.T) {
	if os.Getenv("LEVER_TEST_WORLD") != "1" {
		t.Skip("helper process only")
	}
	for _, a := range []string{lanAddr, internetAddr, linkLocal, metadata} {
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatal(err)
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
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	for {
		n, from, err := u.ReadFrom(buf)
		if err != nil {
			return
		}
		u.WriteTo(buf[:n], from)
	}
}

type upstream struct {
	mu       sync.Mutex
	auth     []string
	requests int
}

func (u *upstream) handler(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.requests++
	u.auth = append(u.auth, r.Header.Get("Authorization"))
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	// The model's answer: submit the task's output.
	fmt.Fprint(w, `{"id":"c1","object":"chat.completion","model":"test-model","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"submit_output","arguments":"{\"output\":\"42\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
}

func lever(t *testing.T, args ...string) (string, int) {
	t.Helper()
	if len(args) > 0 && (args[0] == "up" || args[0] == "apply") {
		// The tests' configs are their own: the grants are confirmed as a script does
		// (cli.TestFirstUpAsks covers the question itself).
		args = append([]string{args[0], "--yes"}, args[1:]...)
	}
	var out, errb bytes.Buffer
	code := cli.Main(args, &out, &errb)
	return out.String() + errb.String(), code
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func checks(t *testing.T, out string) map[string]acceptance.Result {
	t.Helper()
	var rep acceptance.Report
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &rep); err != nil {
		t.Fatalf("acceptance JSON: %v\n%s", err, out)
	}
	m := map[string]acceptance.Result{}
	for _, r := range rep.Results {
		m[r.ID] = r
	}
	return m
}

// TestLeverUpAcceptanceNetns is the bring-up's end-to-end proof on the netns substrate.
func TestLeverUpAcceptanceNetns(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	b := make([]byte, 3)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	dir := t.TempDir()
	// the run user's rootless podman must reach the tree through these
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "src"), 0o777)
	os.Chmod(tree, 0o777)
	key := "sk-lvtb-" + sfx + "-" + hex.EncodeToString(append(b, b...))
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	up := &upstream{}
	srv := httptest.NewServer(http.HandlerFunc(up.handler))
	defer srv.Close()
	jailPort, adminPort := freePort(t), freePort(t)
	// The agent's blueprint comes from the user's lev settings on the host (lev.agents),
	// pushed by the enrol step: never from the tree.
	hostAgents := filepath.Join(dir, "lev-agents")
	os.MkdirAll(hostAgents, 0o755)
	os.WriteFile(filepath.Join(hostAgents, "answer.toml"), []byte("name = \"answer\"\nversion = \"1\"\n[stages.answer]\ntools = [\"submit_output\"]\n"), 0o644)
	cfgPath := filepath.Join(dir, "lever.yaml")
	y := testutil.NetnsYAML("t"+sfx, keyFile, srv.URL, jailPort, adminPort)
	y.ManagerPorts = []int{jailPort}
	y.Workers = []testutil.YAMLWorker{{Name: "w1", Dir: "src", LLMAuth: "api-key"}}
	y.Lev.Agents = hostAgents
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
	be, err := backend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	inst, err := bringup.Load(context.Background(), bringup.Options{Cfg: cfg, Backend: be, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lever(t, "destroy", "-c", cfgPath)
		inst.Teardown(context.Background())
	})

	w := newWorld(t, sfx)
	accArgs := []string{"acceptance", "--json", "--lan", lanAddr, "--internet", internetAddr, "--dns", dnsAddr, "--link-local", linkLocal, "--metadata", metadata, "-c", cfgPath}
	acceptancePasses := func(stage string) {
		t.Helper()
		out, code := lever(t, accArgs...)
		res := checks(t, out)
		for id, r := range res {
			want := acceptance.Pass
			if id == "container-limits" {
				want = acceptance.NA
				if !strings.HasPrefix(r.Detail, acceptance.LimitsNA) {
					t.Errorf("%s: limits detail %q", stage, r.Detail)
				}
			}
			if r.Status != want {
				t.Errorf("%s: %s is %s, want %s: %s", stage, id, r.Status, want, r.Detail)
			}
		}
		if code != 0 || len(res) < 12 {
			t.Fatalf("%s: acceptance exit %d with %d checks:\n%s", stage, code, len(res), out)
		}
	}

	// 1. from nothing to a running lev
	out, code := lever(t, "up", "-c", cfgPath)
	t.Logf("first up:\n%s", out)
	if code != 0 || !strings.Contains(out, "lever-t"+sfx+"-manager running") || !strings.Contains(out, "lever-t"+sfx+"-worker-w1 running") {
		t.Fatalf("up exit %d", code)
	}
	w.wire(t, guestNS)
	acceptancePasses("after first up")

	// 1b. the whole chain: an agent run by lev in the jail completes a task through the
	// broker's /llm/ route; the upstream on the host sees the key on every request.
	uid := strings.TrimSpace(sh(t, "id", "-u", "lever"))
	tok, err := os.ReadFile("/run/user/" + uid + "/lever/agents/manager/token")
	if err != nil {
		t.Fatal(err)
	}
	runOut, runErr := exec.Command("nsenter", "--net=/run/netns/"+guestNS, "runuser", "-u", "lever", "--",
		"env", "XDG_RUNTIME_DIR=/run/user/"+uid, "HOME=/home/lever",
		"podman", "exec", "--env", "LEV_TOKEN="+strings.TrimSpace(string(tok)), "--env", "LEV_MODEL=test-model",
		"lever-t"+sfx+"-manager", "/lev", "run", "answer", "--workdir", "/lever").CombinedOutput()
	t.Logf("lev run: %v\n%s", runErr, runOut)
	up.mu.Lock()
	nreq := up.requests
	up.mu.Unlock()
	if runErr != nil || !strings.Contains(string(runOut), "42") || nreq == 0 {
		t.Fatalf("the agent did not complete its task through the broker (%d upstream requests)", nreq)
	}
	acceptancePasses("after the agent's run (key nowhere in lev's view, env or logs)")

	// 1c. attack the key search: plant the key in the tree; acceptance must fail naming
	// the file as lev sees it, then pass once it is gone.
	leak := filepath.Join(tree, "src", "leak.txt")
	os.WriteFile(leak, []byte("config: "+key+"\n"), 0o644)
	out, code = lever(t, accArgs...)
	if r := checks(t, out)["no-api-key"]; code != 1 || r.Status != acceptance.Fail || !strings.Contains(r.Detail, "/lever/src/leak.txt") {
		t.Fatalf("planted key not found: exit %d, %+v", code, r)
	}
	os.Remove(leak)

	// 2. a second up changes nothing and makes one guest call: the observation, which
	// carries the egress snapshot and the containment check (the egress step judges it)
	out, code = lever(t, "apply", "--json", "-c", cfgPath)
	res, err := resultOf(out)
	if err != nil || code != 0 {
		t.Fatalf("apply --json: %v %d\n%s", err, code, out)
	}
	if res.Changed {
		t.Errorf("second up changed something: %+v", res.Steps)
	}
	for _, s := range res.Steps {
		if s.ID == bringup.StepEgress && (s.Calls != 0 || s.Changed || !strings.Contains(s.Detail, "verified")) {
			t.Errorf("egress step: %d guest calls, changed=%v, %q; want 0 (the observation read it), false, verified", s.Calls, s.Changed, s.Detail)
		}
	}
	t.Logf("warm up: %d guest calls in %s", res.GuestCalls, res.Duration)
	if res.GuestCalls != 1 {
		t.Errorf("warm up made %d guest calls, want 1 (the observation, carrying the egress snapshot and the containment check)", res.GuestCalls)
	}

	// 2b. containment drift on a warm up: the substrate's namespace has no default route;
	// one added is refused by the next up, naming it, before the egress step changes
	// anything. Positive control: without it the same warm up passes, at the same count.
	hv4, _ := be.(interface {
		HostAddrs() (netip.Addr, netip.Addr)
	}).HostAddrs()
	sh(t, "ip", "-n", guestNS, "route", "add", "default", "via", hv4.String())
	out, code = lever(t, "up", "-c", cfgPath)
	if code == 0 || !strings.Contains(out, "containment drifted") || !strings.Contains(out, "default route \"default via "+hv4.String()) {
		t.Fatalf("warm up with a default route in the namespace: exit %d\n%s", code, out)
	}
	sh(t, "ip", "-n", guestNS, "route", "del", "default")
	out, code = lever(t, "apply", "--json", "-c", cfgPath)
	if res2b, err := resultOf(out); err != nil || code != 0 || res2b.Changed || res2b.GuestCalls != res.GuestCalls {
		t.Fatalf("warm up after the drift was removed: exit %d, changed %v, %d guest calls (want %d): %v\n%s", code, res2b.Changed, res2b.GuestCalls, res.GuestCalls, err, out)
	}

	// 3. tamper: a rule that opens the LAN. Acceptance fails naming it; up repairs it.
	sh(t, "ip", "netns", "exec", guestNS, "iptables", "-I", "LEVER_EGRESS", "1", "-d", "192.168.77.0/24", "-j", "ACCEPT")
	out, code = lever(t, accArgs...)
	res2 := checks(t, out)
	if code != 1 || res2["egress-chains"].Status != acceptance.Fail || !strings.Contains(res2["egress-chains"].Detail, "192.168.77.0/24") {
		t.Fatalf("tampered chain not named: exit %d, %+v", code, res2["egress-chains"])
	}
	if res2["private-drop"].Status != acceptance.Fail || !strings.Contains(res2["private-drop"].Detail, "connected") {
		t.Errorf("the opened LAN was not caught by the probe: %+v", res2["private-drop"])
	}
	out, code = lever(t, "up", "-c", cfgPath)
	if code != 0 || !strings.Contains(out, "egress    changed") {
		t.Fatalf("up did not repair egress (exit %d):\n%s", code, out)
	}
	acceptancePasses("after repair")

	// 4. stop, then up again
	if out, code := lever(t, "stop", "-c", cfgPath); code != 0 {
		t.Fatalf("stop: %s", out)
	}
	out, code = lever(t, "up", "-c", cfgPath)
	if code != 0 {
		t.Fatalf("up after stop: %s", out)
	}
	w.wire(t, guestNS)
	acceptancePasses("after stop and up")

	// 5. status --json reports a healthy jail
	out, code = lever(t, "status", "--json", "-c", cfgPath)
	var st bringup.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || !st.Healthy || !st.Egress.Verified {
		t.Fatalf("status: %v %d %s", err, code, out)
	}

	// 6. the key reached the upstream on every request and nowhere in the jail
	up.mu.Lock()
	for i, a := range up.auth {
		if a != "Bearer "+key {
			t.Errorf("upstream request %d carried %q", i, a)
		}
	}
	up.mu.Unlock()

	// 7. destroy leaves nothing behind
	uidOut, _ := exec.Command("id", "-u", "lever").Output()
	if out, code := lever(t, "destroy", "-c", cfgPath); code != 0 {
		t.Fatalf("destroy: %s", out)
	}
	leftovers := []struct{ what, path string }{
		{"namespace", "/run/netns/" + guestNS},
		{"state dir", cfg.StateDir()},
		{"netns etc dir", "/etc/netns/" + guestNS},
		{"run user home", "/home/lever"},
		{"runtime dir", "/run/user/" + strings.TrimSpace(string(uidOut))},
	}
	for _, l := range leftovers {
		if _, err := os.Stat(l.path); err == nil {
			t.Errorf("destroy left the %s %s", l.what, l.path)
		}
	}
	if err := exec.Command("id", "lever").Run(); err == nil {
		t.Errorf("destroy left the run user")
	}
	if out, _ := exec.Command("ps", "-eo", "stat=,args=").Output(); true {
		for _, l := range strings.Split(string(out), "\n") {
			if (strings.Contains(l, guestNS) || strings.Contains(l, "lever-t"+sfx)) && !strings.HasPrefix(l, "Z") {
				t.Errorf("live process left: %s", l)
			}
		}
	}
}

// resultOf reads the bring-up result `lever apply --json` prints after its progress lines.
func resultOf(out string) (bringup.Result, error) {
	var res bringup.Result
	i := strings.Index(out, "{\n")
	if i < 0 {
		return res, errors.New("no JSON result in the output")
	}
	return res, json.Unmarshal([]byte(out[i:]), &res)
}

// yamlEdit replaces what a pattern matches in lever init's lever.yaml.
type yamlEdit struct{ re, with string }

// editInitYAML applies edits to lever init's lever.yaml (yml), in order. Each must match:
// a template that no longer has the line fails here, naming the pattern, rather than
// leaving the default in place for a later step to trip on.
func editInitYAML(t *testing.T, yml string, edits []yamlEdit) string {
	t.Helper()
	edited := yml
	for _, e := range edits {
		re := regexp.MustCompile(e.re)
		if !re.MatchString(edited) {
			t.Fatalf("lever init's lever.yaml has no line matching %s:\n%s", e.re, yml)
		}
		edited = re.ReplaceAllLiteralString(edited, e.with)
	}
	return edited
}
