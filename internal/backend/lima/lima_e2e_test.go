//go:build e2e

package lima

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/testutil"
)

// limaEnv is one Lima e2e run: an unprivileged user (limactl refuses root) running lever,
// limactl and qemu inside a network namespace with only loopback, so the VM has no route
// anywhere but the host agent's own forwarding on that loopback.
type limaEnv struct {
	user, home string
	uid        int
	ns         string
	prefix     string // Lima prefix: bin/limactl, share/lima/...
	lever      string // the lever binary under test
	dir        string // holds lever.yaml, tree/, key
	vm         string
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// buildArtifacts runs the project's build scripts (cached under .cache/lima, so instant
// after CI's "lima artifacts" phase) and returns the image dir and the Lima prefix.
func buildArtifacts(t *testing.T, root string) (image, prefix string) {
	cache := os.Getenv("LEVER_LIMA_CACHE")
	if cache == "" {
		cache = filepath.Join(root, ".cache", "lima")
	}
	last := func(s string) string { l := strings.Split(strings.TrimSpace(s), "\n"); return l[len(l)-1] }
	// LEVER_LIMA_IMAGE_DIR boots an image built elsewhere (a measurement comparing two
	// images in one run, docs/benchmarks-vm.md) instead of the one the script makes.
	if image = os.Getenv("LEVER_LIMA_IMAGE_DIR"); image == "" {
		image = last(run(t, filepath.Join(root, "scripts/lima/build-guest-image.sh"), cache))
	}
	prefix = last(run(t, filepath.Join(root, "scripts/lima/build-limactl.sh"), cache))
	return image, prefix
}

func newLimaEnv(t *testing.T) *limaEnv {
	t.Helper()
	testutil.RequireRoot(t)
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "debootstrap", "ssh", "runuser", "useradd"} {
		testutil.RequireTool(t, tool)
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	image, prefix := buildArtifacts(t, root)

	id := randHex(3)
	e := &limaEnv{user: "lvtl" + id, ns: "lvt-l" + id, prefix: prefix}
	e.vm = "lever-" + e.user

	bin, err := os.MkdirTemp("", "lvt-l-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	os.Chmod(bin, 0o755)
	e.lever = filepath.Join(bin, "lever")
	// The podman bindings linked into lever build only with these tags (see the Makefile).
	build := exec.Command("go", "build", "-tags", "remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp", "-o", e.lever, "./cmd/lever")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building lever: %v\n%s", err, out)
	}

	run(t, "useradd", "-m", "-s", "/bin/bash", e.user)
	e.home = "/home/" + e.user
	e.uid, _ = strconv.Atoi(run(t, "id", "-u", e.user))
	rt := fmt.Sprintf("/run/user/%d", e.uid)
	run(t, "install", "-d", "-m", "0700", "-o", e.user, "-g", e.user, rt)
	run(t, "ip", "netns", "add", e.ns)
	run(t, "ip", "-n", e.ns, "link", "set", "lo", "up")
	t.Cleanup(func() {
		// Best effort, in order: the VM (as its user), then any process left to that user
		// (by pid), then the user, its runtime dir and the namespace.
		_, _, _ = e.as(t, "limactl", "delete", "--force", e.vm)
		if out, err := exec.Command("pgrep", "-u", strconv.Itoa(e.uid)).Output(); err == nil {
			for _, p := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(p); err == nil {
					_ = exec.Command("kill", "-KILL", strconv.Itoa(pid)).Run()
				}
			}
			time.Sleep(time.Second)
		}
		_ = exec.Command("userdel", "-r", "-f", e.user).Run()
		_ = os.RemoveAll(rt)
		_ = exec.Command("ip", "netns", "del", e.ns).Run()
	})

	e.dir = filepath.Join(e.home, "proj")
	e.asOK(t, "mkdir", "-p", e.dir+"/tree")
	e.asOK(t, "sh", "-c", "umask 077; printf 'sk-test\\n' > "+e.dir+"/key")
	cfg := testutil.LeverYAML{Name: e.user, Backend: "lima", Tree: "tree", Disk: "4GiB", Broker: testutil.YAMLBroker{APIKeyFile: "key"},
		Lima: &testutil.YAMLLima{Image: image + "/disk.qcow2", Kernel: image + "/vmlinuz", Initrd: image + "/initrd.img", Limactl: prefix + "/bin/limactl", Accel: "tcg", CPUs: 2, Memory: "2GiB"},
	}.String()
	e.writeFile(t, filepath.Join(e.dir, "lever.yaml"), cfg)
	return e
}

// as runs argv as the test user, inside the namespace, with a clean Lima environment.
func (e *limaEnv) as(t *testing.T, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	args := append([]string{"netns", "exec", e.ns, "runuser", "-u", e.user, "--", "env", "-i",
		"HOME=" + e.home, "USER=" + e.user, "LOGNAME=" + e.user,
		"LIMA_HOME=" + e.home + "/.lima", fmt.Sprintf("XDG_RUNTIME_DIR=/run/user/%d", e.uid),
		"PATH=" + e.prefix + "/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, argv...)
	cmd := exec.Command("ip", args...)
	cmd.Dir = "/"
	var o, er bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &er
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	return o.String(), er.String(), code
}

func (e *limaEnv) asOK(t *testing.T, argv ...string) string {
	t.Helper()
	o, er, code := e.as(t, argv...)
	if code != 0 {
		t.Fatalf("%q exited %d\nstdout: %s\nstderr: %s", argv, code, o, er)
	}
	return o
}

func (e *limaEnv) writeFile(t *testing.T, path, body string) {
	t.Helper()
	cmd := exec.Command("runuser", "-u", e.user, "--", "tee", path)
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing %s: %v %s", path, err, out)
	}
}

// leverRun runs the lever binary as the user; it logs every call with its duration.
func (e *limaEnv) leverRun(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	s := time.Now()
	o, er, code := e.as(t, append([]string{e.lever}, append(args, "-c", filepath.Join(e.dir, "lever.yaml"))...)...)
	t.Logf("lever %s: exit %d in %.1fs\n%s%s", strings.Join(args, " "), code, time.Since(s).Seconds(), o, er)
	return o, er, code
}

// guest runs a command in the VM over Lima's own ssh config, as the run user.
func (e *limaEnv) guest(t *testing.T, script string) (string, int) {
	t.Helper()
	o, er, code := e.as(t, "ssh", "-F", e.home+"/.lima/"+e.vm+"/ssh.config", "-o", "LogLevel=ERROR", "lima-"+e.vm, "--", script)
	return o + er, code
}

func (e *limaEnv) limaList(t *testing.T) string {
	t.Helper()
	return e.asOK(t, "limactl", "list", "--format", "{{.Name}} {{.Status}}")
}

// record saves `limactl list --json` from the real VM for the drift check's unit tests
// when LEVER_LIMA_RECORD names a directory (internal/backend/lima/testdata).
func (e *limaEnv) record(t *testing.T, name string) {
	dir := os.Getenv("LEVER_LIMA_RECORD")
	if dir == "" {
		return
	}
	out := e.asOK(t, "limactl", "list", "--json", e.vm)
	out = strings.ReplaceAll(out, e.home, "/home/lvtl")
	out = strings.ReplaceAll(out, e.user, "lvtl")
	if err := os.WriteFile(filepath.Join(dir, name), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *limaEnv) measureBringUp(t *testing.T) {
	r := &sshRunner{instDir: e.home + "/.lima/" + e.vm, vm: e.vm, wrap: []string{"ip", "netns", "exec", e.ns,
		"runuser", "-u", e.user, "--", "env", "-i", "HOME=" + e.home, "PATH=/usr/bin:/bin"}}
	cfg, err := config.Load(filepath.Join(e.dir, "lever.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec := guest.SpecFor(cfg, HostAlias)
	p, err := ParamsFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec.Containment = containmentScript
	spec.CheckContainment = func(secs guest.Sections) error { return checkContainment(secs, "fuse.sshfs", p.Tree, false) }
	rec := &recorder{inner: r}
	// the facts call alone (EnsureUp without a snapshot), then the bring-up's one call
	if _, err := GatherFacts(context.Background(), rec); err != nil {
		t.Fatalf("facts over the lima runner: %v", err)
	}
	if err := verifiedBringUp(context.Background(), rec, spec); err != nil {
		t.Fatalf("verified bring-up over the lima runner: %v", err)
	}
	if dir := os.Getenv("LEVER_LIMA_RECORD"); dir != "" {
		b, _ := json.MarshalIndent(recording{Spec: spec, Tree: p.Tree, Exchanges: rec.log}, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "guest-verified-bringup.json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c := &guest.Counting{Inner: r}
			if err := verifiedBringUp(context.Background(), c, spec); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(c.Calls()), "guest-calls/op")
		}
	})
	t.Logf("BENCH verified unchanged bring-up (guest half, real VM): %d guest calls, %.0f ms/op over %d runs", len(rec.log)-1, float64(res.NsPerOp())/1e6, res.N)
}

var guestCallsRE = regexp.MustCompile(`verified unchanged .*; (\d+) guest call`)

func TestLimaE2E(t *testing.T) {
	testutil.LockVM(t)
	start := time.Now()
	e := newLimaEnv(t)
	t.Logf("setup (artifacts, lever build, user, netns): %.0fs", time.Since(start).Seconds())

	// 1. A fresh VM: bring-up, egress applied and verified in the guest.
	s := time.Now()
	o, _, code := e.leverRun(t, "egress", "apply")
	if code != 0 {
		t.Fatalf("first egress apply exited %d", code)
	}
	t.Logf("first bring-up + egress apply: %.0fs", time.Since(s).Seconds())
	if !strings.Contains(o, "egress: rebuilt") {
		t.Errorf("first apply on a fresh VM should rebuild, got %q", o)
	}
	if _, _, code := e.leverRun(t, "egress", "verify"); code != 0 {
		t.Fatalf("verify after apply exited %d, want 0 (match)", code)
	}

	// The tree is really mounted at /lever, writable, both ways, and nothing else is.
	e.writeFile(t, filepath.Join(e.dir, "tree", "from-host"), "hello from host\n")
	if out, code := e.guest(t, "cat /lever/from-host && echo guest-wrote > /lever/from-guest && findmnt -n -o FSTYPE /lever"); code != 0 ||
		!strings.Contains(out, "hello from host") || !strings.Contains(out, "fuse.sshfs") {
		t.Fatalf("tree not mounted at /lever: exit %d: %s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(e.dir, "tree", "from-guest")); err != nil || string(b) != "guest-wrote\n" {
		t.Fatalf("guest write did not reach the host tree: %q %v", b, err)
	}
	if out, _ := e.guest(t, "findmnt -rn -o TARGET,FSTYPE | grep -E 'sshfs|9p|virtiofs' || true"); strings.TrimSpace(out) != "/lever fuse.sshfs" {
		t.Errorf("host-backed mounts in the guest = %q, want only /lever", out)
	}
	if out, _ := e.guest(t, "systemctl is-active containerd 2>&1; systemctl --user is-active containerd 2>&1; command -v nerdctl || true"); strings.Contains(out, "\nactive") || strings.HasPrefix(out, "active") {
		t.Errorf("containerd is running in the guest: %q", out)
	}
	// A guest listener is not forwarded to the host: the ignore-all rules hold.
	e.guest(t, "nohup python3 -m http.server 18080 --bind 0.0.0.0 >/dev/null 2>&1 & sleep 3")
	time.Sleep(5 * time.Second)
	if out, _, _ := e.as(t, "sh", "-c", "ss -ltnH 'sport = :18080'"); strings.TrimSpace(out) != "" {
		t.Errorf("guest port 18080 is forwarded to the host: %q", out)
	}

	// 2. A rule tampered inside the VM is reported by verify, and apply repairs it.
	if out, code := e.guest(t, "sudo iptables -I LEVER_EGRESS 1 -j ACCEPT"); code != 0 {
		t.Fatalf("tampering: %s", out)
	}
	o, _, code = e.leverRun(t, "egress", "verify")
	if code != 1 || !strings.Contains(o, "egress: drift") || !strings.Contains(o, "-j ACCEPT") {
		t.Fatalf("verify after tampering: exit %d %q, want exit 1 naming the extra ACCEPT", code, o)
	}
	if o, _, code = e.leverRun(t, "egress", "apply"); code != 0 || !strings.Contains(o, "egress: rebuilt") {
		t.Fatalf("apply after tampering: exit %d %q, want a rebuild", code, o)
	}
	if _, _, code := e.leverRun(t, "egress", "verify"); code != 0 {
		t.Fatalf("verify after repair exited %d", code)
	}

	// 3. A verified, unchanged bring-up: count the guest round-trips.
	s = time.Now()
	o, _, code = e.leverRun(t, "egress", "apply")
	m := guestCallsRE.FindStringSubmatch(o)
	if code != 0 || m == nil {
		t.Fatalf("apply on an unchanged VM: exit %d %q, want verified unchanged", code, o)
	}
	n, _ := strconv.Atoi(m[1])
	t.Logf("ROUND-TRIPS verified unchanged bring-up on lima: %d guest call(s) in all (the bring-up guest check carries the egress snapshot), in %.1fs", n, time.Since(s).Seconds())
	if n != 1 {
		t.Errorf("a verified, unchanged lever egress apply made %d guest calls, want 1: the snapshot rides Lima's own call after EnsureUp", n)
	}

	e.record(t, "list-fresh.json")

	// The same guest half of a verified bring-up, in-process over lever's runner: count and
	// time it, and record the exchanges for the unit benchmark.
	e.measureBringUp(t)

	// 4. A global override.yaml widening the VM: bring-up fails closed, naming the
	// difference, and lever does nothing else (no guest call is made).
	extra := filepath.Join(e.home, "extra")
	e.asOK(t, "mkdir", "-p", extra, e.home+"/.lima/_config")
	override := e.home + "/.lima/_config/override.yaml"
	for _, c := range []struct{ name, yaml, want string }{
		{"mount", "mounts:\n- location: " + extra + "\n  mountPoint: /extra\n  writable: false\n",
			"mounts[1]: " + extra + " at /extra (writable=false) is not in the template"},
		{"portforward", "portForwards:\n- guestPort: 8080\n  hostPort: 18080\n",
			`portForwards[0]: {"guestIP":"127.0.0.1","guestPort":8080,"guestPortRange":[8080,8080],"hostIP":"127.0.0.1","hostPort":18080,"hostPortRange":[18080,18080],"proto":"tcp"} is not in the template`},
		{"containerd", "containerd:\n  user: true\n", "containerd.user: true, template asks for false"},
	} {
		e.writeFile(t, override, c.yaml)
		e.record(t, "list-override-"+c.name+".json")
		_, er, code := e.leverRun(t, "egress", "apply")
		if code == 0 || !strings.Contains(er, "realized config differs") || !strings.Contains(er, c.want) {
			t.Errorf("apply with an override %s: exit %d, stderr %q; want failure naming %q", c.name, code, er, c.want)
		}
	}
	os.Remove(override)

	// 5. stop keeps the VM; apply resumes the same one and verifies again.
	e.guest(t, "echo "+e.vm+" | sudo tee /var/lib/lever-marker >/dev/null")
	if _, _, code := e.leverRun(t, "stop"); code != 0 {
		t.Fatalf("lever stop exited %d", code)
	}
	if l := e.limaList(t); !strings.Contains(l, e.vm+" Stopped") {
		t.Fatalf("after stop, limactl list = %q, want %s Stopped", l, e.vm)
	}
	s = time.Now()
	if _, _, code := e.leverRun(t, "egress", "apply"); code != 0 {
		t.Fatalf("apply after stop exited %d", code)
	}
	t.Logf("resume + egress apply: %.0fs", time.Since(s).Seconds())
	if out, _ := e.guest(t, "cat /var/lib/lever-marker"); strings.TrimSpace(out) != e.vm {
		t.Fatalf("resumed VM lost its disk state: marker = %q", out)
	}
	if _, _, code := e.leverRun(t, "egress", "verify"); code != 0 {
		t.Fatalf("verify after resume exited %d", code)
	}

	// 6. destroy leaves no VM and no files.
	if _, _, code := e.leverRun(t, "destroy"); code != 0 {
		t.Fatalf("lever destroy exited %d", code)
	}
	if l := e.limaList(t); strings.Contains(l, e.vm) {
		t.Fatalf("after destroy, limactl list still has the VM: %q", l)
	}
	for _, p := range []string{e.home + "/.lima/" + e.vm, e.home + "/.local/state/lever/" + e.user} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after destroy %s still exists (%v)", p, err)
		}
	}
	if out, _, _ := e.as(t, "sh", "-c", "find $HOME/.cache -path '*lima*' 2>/dev/null || true"); strings.TrimSpace(out) != "" {
		t.Errorf("after destroy, Lima files left behind: %q", out)
	}
	// The host agent reaps qemu after delete returns: wait for it, then no live qemu may
	// remain (a zombie is already dead and about to be reaped).
	var left string
	for i := 0; i < 30; i++ {
		left, _, _ = e.as(t, "sh", "-c", "ps -u $(id -u) -o stat=,pid=,comm= | grep -v '^Z' | grep -E 'qemu|limactl' || true")
		if strings.TrimSpace(left) == "" {
			break
		}
		time.Sleep(time.Second)
	}
	if strings.TrimSpace(left) != "" {
		t.Errorf("after destroy, processes left: %q", left)
	}
	t.Logf("LIMA E2E total: %.0fs", time.Since(start).Seconds())
}

// A fresh VM under a global override.yaml that adds a mount is refused before its first
// boot: limactl create runs, the drift check names the mount, and qemu never starts.
func TestLimaFreshVMDriftRefusedBeforeBoot(t *testing.T) {
	testutil.LockVM(t)
	e := newLimaEnv(t)
	extra := filepath.Join(e.home, "extra")
	e.asOK(t, "mkdir", "-p", extra, e.home+"/.lima/_config")
	e.writeFile(t, e.home+"/.lima/_config/override.yaml", "mounts:\n- location: "+extra+"\n  mountPoint: /extra\n  writable: true\n")
	_, er, code := e.leverRun(t, "egress", "apply")
	want := "mounts[1]: " + extra + " at /extra (writable=true) is not in the template"
	if code == 0 || !strings.Contains(er, "realized config differs") || !strings.Contains(er, want) {
		t.Fatalf("fresh VM with an override mount: exit %d, stderr %q; want failure naming %q", code, er, want)
	}
	if l := e.limaList(t); !strings.Contains(l, e.vm+" Stopped") {
		t.Fatalf("limactl list = %q, want %s created but never started", l, e.vm)
	}
	if out, _, _ := e.as(t, "sh", "-c", "ps -u $(id -u) -o comm= | grep -c qemu || true"); strings.TrimSpace(out) != "0" {
		t.Fatalf("qemu ran for a VM that failed the drift check: %q", out)
	}
	if _, _, code := e.leverRun(t, "destroy"); code != 0 {
		t.Fatalf("lever destroy exited %d", code)
	}
	if l := e.limaList(t); strings.Contains(l, e.vm) {
		t.Fatalf("after destroy, limactl list still has the VM: %q", l)
	}
}
