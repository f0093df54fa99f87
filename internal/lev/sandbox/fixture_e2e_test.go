//go:build e2e

package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/lev/sandbox/sbxtest"
	"github.com/lever-jail/lever/internal/testutil"
)

// The e2e fixture: an unprivileged user (prefix lvtsbx) with subordinate ids and a
// /run/user directory, running rootless podman with an image imported from a
// busybox-static rootfs built here (nothing is pulled). Created once per test binary and
// removed in TestMain.
type fixture struct {
	user     string
	uid, gid int
	root     string // /tmp/lvtsbx-*: rootfs tarball and workdirs
	env      []string
	cred     *syscall.Credential
	// keepAlive is a copy of the test binary: the warm containers' PID 1.
	keepAlive string
	subStart  int
	image     string
	rootImg   bool // image also imported into root's storage
}

var (
	fxOnce sync.Once
	fx     *fixture
	fxErr  error
)

const (
	testImage = "localhost/lvtsbx-busybox:e2e"
	// On this host crun fails on hybrid cgroups (MACHINE-NOTES): use runc.
	rootlessRuntime = "runc"
)

func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == KeepAliveArg {
		// This test binary is the warm containers' PID 1, as lev's is in production.
		os.Exit(KeepAliveMain())
	}
	code := m.Run()
	if fx != nil {
		fx.teardown()
	}
	os.Exit(code)
}

func podmanFixture(tb testing.TB) *fixture {
	tb.Helper()
	testutil.RequireRoot(tb)
	for _, tool := range []string{"podman", "runc", "newuidmap", "setpriv", "useradd", "unshare"} {
		testutil.RequireTool(tb, tool)
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		testutil.RequireTool(tb, "busybox")
	}
	fxOnce.Do(func() { fx, fxErr = setupFixture() })
	if fxErr != nil {
		tb.Fatalf("e2e fixture: %v", fxErr)
	}
	return fx
}

func run(argv ...string) (string, error) {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%v: %w: %s", argv, err, out)
	}
	return string(out), nil
}

func setupFixture() (*fixture, error) {
	var b [3]byte
	rand.Read(b[:])
	f := &fixture{user: "lvtsbx" + hex.EncodeToString(b[:]), image: testImage}
	var err error
	if f.root, err = os.MkdirTemp("", "lvtsbx-"); err != nil {
		return f, err
	}
	os.Chmod(f.root, 0o755)
	if _, err := run("useradd", "-m", "-s", "/bin/sh", f.user); err != nil {
		return f, err
	}
	fx = f // so TestMain tears down even a half-built fixture
	out, _ := run("id", "-u", f.user)
	f.uid, _ = strconv.Atoi(strings.TrimSpace(out))
	out, _ = run("id", "-g", f.user)
	f.gid, _ = strconv.Atoi(strings.TrimSpace(out))
	f.subStart = freeSubRange()
	rng := fmt.Sprintf("%d-%d", f.subStart, f.subStart+65535)
	if _, err := run("usermod", "--add-subuids", rng, "--add-subgids", rng, f.user); err != nil {
		return f, err
	}
	rt := fmt.Sprintf("/run/user/%d", f.uid)
	if err := os.MkdirAll(rt, 0o700); err != nil {
		return f, err
	}
	os.Chown(rt, f.uid, f.gid)
	home := "/home/" + f.user
	f.env = []string{"HOME=" + home, "USER=" + f.user, "XDG_RUNTIME_DIR=" + rt, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}
	f.cred = &syscall.Credential{Uid: uint32(f.uid), Gid: uint32(f.gid)}
	tarball := filepath.Join(f.root, "rootfs.tar")
	if err := sbxtest.WriteBusyboxRootfs(tarball); err != nil {
		return f, err
	}
	if _, err := f.asUser("podman", "--runtime", rootlessRuntime, "import", tarball, f.image); err != nil {
		return f, err
	}
	// The keep-alive (this test binary) where the rootless user can reach it: go test's
	// build directory is root's alone.
	self, err := os.Executable()
	if err != nil {
		return f, err
	}
	f.keepAlive = filepath.Join(f.root, "lev-keepalive")
	if _, err := run("cp", self, f.keepAlive); err != nil {
		return f, err
	}
	os.Chmod(f.keepAlive, 0o755)
	return f, nil
}

// freeSubRange picks a subordinate id range above every range already assigned.
func freeSubRange() int {
	max := 5_000_000
	for _, p := range []string{"/etc/subuid", "/etc/subgid"} {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			parts := strings.Split(sc.Text(), ":")
			if len(parts) != 3 {
				continue
			}
			s, _ := strconv.Atoi(parts[1])
			n, _ := strconv.Atoi(parts[2])
			if s+n > max {
				max = s + n
			}
		}
		fh.Close()
	}
	return max + 65536
}

func (f *fixture) asUser(argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	cmd.Env = f.env
	cmd.Dir = f.root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("as %s: %v: %w: %s", f.user, argv, err, out.String())
	}
	return out.String(), nil
}

// workdir makes a directory owned by the test user.
func (f *fixture) workdir(tb testing.TB) string {
	tb.Helper()
	d, err := os.MkdirTemp(f.root, "work-")
	if err != nil {
		tb.Fatal(err)
	}
	os.Chown(d, f.uid, f.gid)
	return d
}

func (f *fixture) rootlessOptions() Options {
	return Options{Engine: "podman", EngineArgs: []string{"--runtime", rootlessRuntime}, Credential: f.cred, Env: f.env,
		PidsLimit: 64, Memory: "64m", KeepAlive: f.keepAlive}
}

// rootfulImage imports the image into root's podman storage too.
func (f *fixture) rootfulImage(tb testing.TB) {
	tb.Helper()
	if f.rootImg {
		return
	}
	if _, err := run("podman", "--runtime", rootlessRuntime, "import", filepath.Join(f.root, "rootfs.tar"), f.image); err != nil {
		tb.Fatal(err)
	}
	f.rootImg = true
}

func (f *fixture) teardown() {
	if f.uid != 0 {
		f.asUser("podman", "--runtime", rootlessRuntime, "rm", "-a", "-f")
		f.asUser("podman", "--runtime", rootlessRuntime, "system", "reset", "-f")
		// Whatever rootless podman left running under this user (its pause process): the
		// user is this test's own, so every process it owns was started here.
		for _, pid := range pidsOf(f.uid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if f.rootImg {
		run("podman", "rmi", "-f", f.image)
	}
	if f.subStart != 0 {
		rng := fmt.Sprintf("%d-%d", f.subStart, f.subStart+65535)
		run("usermod", "--del-subuids", rng, "--del-subgids", rng, f.user)
	}
	run("userdel", "-r", "-f", f.user)
	if f.uid != 0 {
		os.RemoveAll(fmt.Sprintf("/run/user/%d", f.uid))
	}
	if f.root != "" {
		os.RemoveAll(f.root)
	}
}

func pidsOf(uid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid {
			out = append(out, pid)
		}
	}
	return out
}

func mustRun(tb testing.TB, ex Executor, script, dir string) string {
	tb.Helper()
	res, err := ex.Run(context.Background(), Command{Script: script, Dir: dir})
	if err != nil || res.ExitCode != 0 {
		tb.Fatalf("%q in %s: exit %d, %v: %s %s", script, ex.Kind(), res.ExitCode, err, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}
