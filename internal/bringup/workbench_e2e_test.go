//go:build e2e

package bringup

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/levimage"
	"github.com/lever-jail/lever/internal/testutil"
)

func wbFreePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func wbLevBinary(t testing.TB) string {
	if p, err := filepath.Abs("../../bin/lev"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	out := filepath.Join(t.TempDir(), "lev")
	cmd := exec.Command("go", "build", "-o", out, "../../cmd/lev")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building lev: %v: %s", err, b)
	}
	return out
}

// TestWorkbenchImageE2E brings a closed-egress netns jail up on this machine (its real
// dpkg database, the test user's rootless podman, no registry): the image step builds the
// workbench from the guest's own packages and loads it; a container of it, with the jail's
// hardening, runs git, make and finds the CA bundle, and /lev runs. A second bring-up
// finds the tag from the observe call's dpkg digest: no image load or build, no guest
// call in the image step. A user base (lev.base_image) is layered once likewise.
// wbJail is a closed-egress netns jail config on this machine, not yet up; first is the
// instance whose cleanup tears it all down.
type wbJail struct {
	sfx, dir, tree, lev, cfgPath, exe string
}

func newWBJail(t testing.TB) *wbJail {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	b := make([]byte, 3)
	rand.Read(b)
	j := &wbJail{sfx: hex.EncodeToString(b), dir: t.TempDir()}
	os.Chmod(j.dir, 0o755)
	os.Chmod(filepath.Dir(j.dir), 0o755)
	j.tree = filepath.Join(j.dir, "tree")
	os.MkdirAll(j.tree, 0o777)
	os.Chmod(j.tree, 0o777)
	keyFile := filepath.Join(j.dir, "api-key")
	os.WriteFile(keyFile, []byte("sk-wb-"+j.sfx+"\n"), 0o600)
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	jp, ap := wbFreePort(t), wbFreePort(t)
	j.cfgPath = filepath.Join(j.dir, "lever.yaml")
	y := testutil.NetnsYAML("w"+j.sfx, keyFile, srv.URL, jp, ap)
	y.ManagerPorts = []int{jp}
	y.Write(t, j.cfgPath)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_NETNS_PREFIX", "lvtb")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(j.dir, "state"))
	j.lev = wbLevBinary(t)
	t.Setenv("LEVER_LEV_BINARY", j.lev)
	t.Setenv("LEVER_TEST_AS_LEVER", "1")
	j.exe, _ = os.Executable()
	return j
}

func (j *wbJail) mk(t testing.TB) *Instance {
	t.Helper()
	cfg, err := config.Load(j.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	be, err := backend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := Load(context.Background(), Options{Cfg: cfg, Backend: be, Exe: j.exe})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// teardown removes the broker, the run user (podman storage included) and the namespace.
func (j *wbJail) teardown(t testing.TB, in *Instance) {
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		brokerctl.Stop(cctx, in.cfg.StateDir(), 10*time.Second)
		in.Teardown(cctx)
		in.b.Destroy(cctx)
	})
}

func TestWorkbenchImageE2E(t *testing.T) {
	j := newWBJail(t)
	sfx, dir, tree, lev, exe := j.sfx, j.dir, j.tree, j.lev, j.exe
	mk := func() *Instance { return j.mk(t) }
	ctx := context.Background()
	first := mk()
	j.teardown(t, first)
	imageStep := func(r *Result) StepResult {
		for _, s := range r.Steps {
			if s.ID == StepImage {
				return s
			}
		}
		t.Fatal("no image step")
		return StepResult{}
	}

	// 1. cold: built from the guest's packages and loaded
	res, err := first.Execute(ctx)
	if err != nil {
		t.Fatalf("first up: %v", err)
	}
	cold := imageStep(res)
	firstBench, firstClient := res.facts.BenchRef, res.facts.Podman.(podmanClient).Client
	t.Logf("cold image step: %s in %s, %d guest calls", cold.Detail, cold.Duration, cold.Calls)
	if !cold.Changed || !strings.Contains(cold.Detail, "made in the guest from") || !strings.Contains(cold.Detail, "in the guest (") || !filepath.IsAbs(firstBench) {
		t.Fatalf("cold image step did not build the workbench: %+v", cold)
	}
	if cold.Calls != 1 {
		t.Errorf("cold image step made %d guest calls, want 1 (the helper reads dpkg and makes lev's tree and the workbench's)", cold.Calls)
	}
	// lev's 21 MiB are written once: the workbench's /lev is lev's tree's
	levTree := first.levTree()
	if a, b := ino(t, filepath.Join(levTree, "lev")), ino(t, filepath.Join(firstBench, "lev")); a != b {
		t.Errorf("the workbench's /lev (inode %d) is not lev's tree's (%d)", b, a)
	}
	// The lev image was built and loaded in the guest and the workbench is a tree: nothing
	// crossed the podman socket.
	if n := firstClient.ImageWrites(); n != 0 {
		t.Errorf("cold up made %d image loads/builds over the podman socket, want 0", n)
	}
	if fi, err := os.Lstat(firstBench); err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		t.Fatalf("the workbench's tree %s: %v %v", firstBench, fi, err)
	}

	// 2. inside, under the jail's confinement
	runtime := os.Getenv("LEVER_OCI_RUNTIME") // as Containers(): provisioning picked the default
	ct := func(name string) containers.Container {
		return containers.Container{
			Name: "lever-w" + sfx + "-" + name, Rootfs: firstBench, Runtime: runtime,
			Entrypoint: []string{"/lev"},
			PidsLimit:  256, MemoryBytes: 512 << 20,
			Env:    map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp"},
			Mounts: []containers.Mount{{Source: tree, Dest: containers.TreeDir}},
			Labels: map[string]string{containers.LabelInstance: "w" + sfx},
		}
	}
	cases := []struct {
		name       string
		entrypoint []string
		cmd        []string
		wantCode   int32
		want       []string
	}{
		{"userland", []string{"/bin/sh", "-c"},
			[]string{"git --version && make --version && ls /etc/ssl/certs/ca-certificates.crt && awk 'BEGIN{print \"awk ok\"}' && tar --version && diff --version && find /usr/bin -name sed && grep -c . /etc/ssl/certs/ca-certificates.crt"},
			0, []string{"git version", "GNU Make", "/etc/ssl/certs/ca-certificates.crt", "awk ok", "GNU tar", "diff (GNU diffutils)", "/usr/bin/sed"}},
		{"git works in the tree", []string{"/bin/sh", "-c"},
			[]string{"cd /lever && git init -q w && cd w && echo hi > f && git add f && git -c user.email=a@b -c user.name=a commit -qm m && git log --oneline | wc -l"},
			0, []string{"1"}},
		{"confinement", []string{"/bin/sh", "-c"},
			[]string{"grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; touch /usr/bin/x 2>&1 || echo rootfs-readonly; find / -xdev -perm /6000 -type f 2>/dev/null | wc -l"},
			0, []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "rootfs-readonly"}},
		// negative control: the image is not the lev-only image (which has no shell)
		{"no such tool", []string{"/bin/sh", "-c"}, []string{"nosuchtool"}, 127, []string{"not found"}},
		{"lev runs", []string{"/lev"}, []string{"--help"}, 0, []string{"lev"}},
	}
	cases = append(cases, struct {
		name       string
		entrypoint []string
		cmd        []string
		wantCode   int32
		want       []string
	}{"lev bench", []string{"/lev"}, []string{"bench", "--help"}, 0, []string{"serve"}})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ct(fmt.Sprintf("probe%d", i))
			c.Command = tc.cmd
			code, out, err := firstClient.RunOnce(c, tc.entrypoint)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, tc.wantCode, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tc.name == "confinement" {
				lines := strings.Split(strings.TrimSpace(out), "\n")
				if last := lines[len(lines)-1]; last != "0" {
					t.Errorf("%s setuid/setgid files in the workbench", last)
				}
			}
		})
	}

	// 3. warm: a new instance (a new `lever up`) finds the tag with no load and no call
	second := mk()
	res, err = second.Execute(ctx)
	if err != nil {
		t.Fatalf("second up: %v", err)
	}
	warm := imageStep(res)
	t.Logf("warm image step: %s in %s, %d guest calls; up total %d guest calls", warm.Detail, warm.Duration, warm.Calls, res.GuestCalls)
	if warm.Changed || warm.Calls != 0 || !strings.Contains(warm.Detail, "workbench "+firstBench+" present") || res.facts.BenchRef != firstBench {
		t.Errorf("warm image step: %+v (benchRef %s)", warm, res.facts.BenchRef)
	}
	if n := res.facts.Podman.(podmanClient).Client.ImageWrites(); n != 0 {
		t.Errorf("warm up made %d image loads/builds, want 0", n)
	}
	// positive control for the counter: the observed digest is what makes it warm;
	// without it the workbench goes to the image helper, which reads the guest's digest
	// and finds the same tree whole, in one call (and nothing is loaded).
	third := mk()
	f3 := third.Observe(ctx).Facts
	f3.StatusSum = ""
	c3, err := third.connect(ctx, f3.UID)
	if err != nil {
		t.Fatal(err)
	}
	calls := third.Runner.Calls()
	ch, detail, plan3, _, err := third.ensureBench(ctx, c3, Observed{}, f3)
	if err != nil || ch || plan3 == nil || third.Runner.Calls() != calls || c3.ImageWrites() != 0 {
		t.Errorf("without the observed digest: changed %v, %d calls, %d writes, %q, %v", ch, third.Runner.Calls()-calls, c3.ImageWrites(), detail, err)
	}
	lines, _, f3, err := third.buildInGuest(ctx, "", plan3, f3)
	if err != nil || f3.BenchRef != firstBench || f3.StatusSum != res.facts.StatusSum || third.Runner.Calls()-calls != 1 ||
		!strings.Contains(strings.Join(lines, "; "), "workbench "+firstBench+" present") {
		t.Errorf("the helper without the observed digest: %q %+v, %d calls, %v", lines, f3, third.Runner.Calls()-calls, err)
	}

	// 4. a user base already in podman: the workbench itself serves as one (it has a
	// shell); lev is layered on it in podman, once.
	// bad input first: a base that is not in podman is named, and nothing is built
	bad := mk()
	bad.cfg.Lev.BaseImage = "localhost/lever/nosuch:1"
	fb := bad.Observe(ctx).Facts
	cb, err := bad.connect(ctx, fb.UID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := bad.ensureBench(ctx, cb, Observed{}, fb); err == nil || !strings.Contains(err.Error(), "lev.base_image localhost/lever/nosuch:1 is not in the run user's podman") || cb.ImageWrites() != 0 {
		t.Errorf("missing base image: %v, %d image writes", err, cb.ImageWrites())
	}
	// a base with a shell: the workbench's tree, made an image here
	baseRef := imageFromTree(t, firstClient, firstBench, lev, "localhost/lever/testbase:"+sfx)
	cfg := mk().cfg
	cfg.Lev.BaseImage = baseRef
	be, _ := backend.New(cfg)
	ub, err := Load(context.Background(), Options{Cfg: cfg, Backend: be, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	fu := ub.Observe(ctx).Facts
	cu, err := ub.connect(ctx, fu.UID)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	ch, detail, _, fu, err = ub.ensureBench(ctx, cu, Observed{}, fu)
	if err != nil || !ch || fu.BenchRef == "" || fu.BenchRef == baseRef {
		t.Fatalf("user base: changed %v ref %s: %q %v", ch, fu.BenchRef, detail, err)
	}
	t.Logf("user base layered in %s: %s", time.Since(t0), detail)
	c := ct("userbase")
	c.Image, c.Rootfs, c.Command = fu.BenchRef, "", []string{"test -x /lev && /lev --help >/dev/null && git --version"}
	if code, out, err := cu.RunOnce(c, []string{"/bin/sh", "-c"}); err != nil || code != 0 || !strings.Contains(out, "git version") {
		t.Errorf("user-base workbench: exit %d %v: %s", code, err, out)
	}
	ch, detail, _, _, err = ub.ensureBench(ctx, cu, Observed{}, fu)
	if err != nil || ch || cu.ImageWrites() != 1 || !strings.Contains(detail, "present") { // the layering above
		t.Errorf("user base again: changed %v, %d writes, %q, %v", ch, cu.ImageWrites(), detail, err)
	}

	// 5. a base tarball on the host: lever's own lev-only image archive stands for one
	// (no shell: the layered image runs /lev); loaded and layered once.
	levIm, err := levimage.Build(levimage.Spec{LevBinary: lev})
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "base.tar")
	os.WriteFile(tarPath, levIm.Archive, 0o644)
	cfg = mk().cfg
	cfg.Lev.BaseTarball = tarPath
	be, _ = backend.New(cfg)
	tb, err := Load(context.Background(), Options{Cfg: cfg, Backend: be, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	ft := tb.Observe(ctx).Facts
	ct5, err := tb.connect(ctx, ft.UID)
	if err != nil {
		t.Fatal(err)
	}
	ch, detail, _, ft, err = tb.ensureBench(ctx, ct5, Observed{}, ft)
	if err != nil || !ch || ft.BenchRef == "" || ct5.ImageWrites() != 2 { // load + layer
		t.Fatalf("base tarball: changed %v ref %s writes %d: %q %v", ch, ft.BenchRef, ct5.ImageWrites(), detail, err)
	}
	c = ct("tarbase")
	c.Image, c.Rootfs, c.Command = ft.BenchRef, "", []string{"--help"}
	if code, out, err := ct5.RunOnce(c, []string{"/lev"}); err != nil || code != 0 {
		t.Errorf("tarball-base workbench: exit %d %v: %s", code, err, out)
	}
	// a new instance from the same config (New digests the tarball once)
	be, _ = backend.New(cfg)
	tb2, err := Load(context.Background(), Options{Cfg: cfg, Backend: be, Exe: exe})
	if err != nil {
		t.Fatal(err)
	}
	ft2 := tb2.Observe(ctx).Facts
	ct6, _ := tb2.connect(ctx, ft2.UID)
	ch, detail, _, ft2, err = tb2.ensureBench(ctx, ct6, Observed{}, ft2)
	if err != nil || ch || ct6.ImageWrites() != 0 || ft2.BenchRef != ft.BenchRef {
		t.Errorf("base tarball again: changed %v, %d writes, %q, %v", ch, ct6.ImageWrites(), detail, err)
	}
}

// BenchmarkWorkbench: the default workbench's cold build (the helper reads dpkg, plans and
// makes the tree; once, in the parent, which runs a single time because it has a
// sub-benchmark) and a warm bring-up's workbench decision (b.N times: a new instance's observe call plus the
// presence check).
func BenchmarkWorkbench(b *testing.B) {
	j := newWBJail(b)
	ctx := context.Background()
	first := j.mk(b)
	j.teardown(b, first)
	res, err := first.Execute(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var cold StepResult
	for _, s := range res.Steps {
		if s.ID == StepImage {
			cold = s
		}
	}
	b.Run("warm", func(b *testing.B) {
		var calls int64
		for i := 0; i < b.N; i++ {
			in := j.mk(b)
			obs := in.Observe(ctx)
			fi := obs.Facts
			c, err := in.connect(ctx, fi.UID)
			if err != nil {
				b.Fatal(err)
			}
			c0 := in.Runner.Calls()
			if ch, d, plan, _, err := in.ensureBench(ctx, c, obs, fi); err != nil || ch || plan != nil {
				b.Fatalf("warm: changed %v %q %v", ch, d, err)
			}
			calls += in.Runner.Calls() - c0
		}
		b.ReportMetric(float64(cold.Duration.Milliseconds()), "cold-image-step-ms")
		b.ReportMetric(float64(cold.Calls), "cold-guest-calls")
		b.ReportMetric(float64(calls)/float64(b.N), "warm-guest-calls/op")
	})
}

// imageFromTree loads the tree as a two-layer image (the tree, normalised, and lev), the
// way lever built the default workbench before it became a tree: a base with a shell.
func imageFromTree(t *testing.T, c *containers.Client, tree, lev, ref string) string {
	t.Helper()
	ents, err := os.ReadDir(tree)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-C", tree, "-cf", "-"}
	for _, e := range ents {
		args = append(args, e.Name())
	}
	// The tree's files are hard links to the host's own (the netns substrate's guest is the
	// host): another test making a workbench at the same time links them again, which
	// changes their ctime, and GNU tar then exits 1 ("file changed as we read it") with the
	// contents archived whole. Only that is let pass.
	var stderr bytes.Buffer
	cmd := exec.Command("tar", args...)
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 1 && onlyChanged(stderr.String()) {
		err = nil
	}
	if err != nil {
		t.Fatalf("tar of %s: %v\n%s", tree, err, stderr.String())
	}
	layer, _, err := levimage.NormaliseLayer(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	arch, err := exec.Command("dpkg", "--print-architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	im, err := levimage.BuildWorkbench(lev, layer, ref, strings.TrimSpace(string(arch)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.LoadArchive(im.Archive); err != nil {
		t.Fatal(err)
	}
	return ref
}

func ino(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// onlyChanged says whether tar's messages are all "file changed as we read it".
func onlyChanged(msgs string) bool {
	for _, l := range strings.Split(strings.TrimSpace(msgs), "\n") {
		if !strings.Contains(l, "file changed as we read it") {
			return false
		}
	}
	return true
}
