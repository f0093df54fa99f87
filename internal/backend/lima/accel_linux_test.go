//go:build linux

package lima

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/config"
)

const accelChildEnv = "LEVER_LIMA_ACCEL_CHILD"

// accelReport is what the child (running as the unprivileged VM owner) saw.
type accelReport struct {
	Auto         Accel
	AutoErr      string
	KVMErr       string
	UpErr        string
	UpMillis     int64
	LimactlCalls bool
	Warnings     []string
}

// TestAccelChild is the body run as another user by TestHostAccelRealDevice; it does
// nothing in a normal run.
func TestAccelChild(t *testing.T) {
	dir := os.Getenv(accelChildEnv)
	if dir == "" {
		t.Skip("runs only as TestHostAccelRealDevice's child")
	}
	var r accelReport
	var err error
	r.Auto, err = HostAccel("auto")
	if err != nil {
		r.AutoErr = err.Error()
	}
	if _, err := HostAccel("kvm"); err != nil {
		r.KVMErr = err.Error()
	}
	// lever up's path with lima.accel: kvm: New, then EnsureUp, with a limactl that
	// records being run. It must fail before limactl (so before qemu) runs.
	marker := filepath.Join(dir, "limactl-ran")
	bin := filepath.Join(dir, "limactl")
	os.WriteFile(bin, []byte("#!/bin/sh\ntouch "+marker+"\necho limactl version 1.2.2\n"), 0o755)
	os.Setenv("LIMA_HOME", filepath.Join(dir, "lima"))
	os.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
	accelWarn = func(l string) { r.Warnings = append(r.Warnings, l) }
	cfg := &config.Config{Name: "acc", Backend: "lima", TreePath: dir, Dir: dir,
		Lima: config.Lima{Image: "/i/disk.qcow2", Limactl: bin, Accel: "kvm"}}
	start := time.Now()
	l, err := New(cfg)
	if err == nil {
		err = l.EnsureUp(context.Background())
	}
	r.UpMillis = time.Since(start).Milliseconds()
	if err != nil {
		r.UpErr = err.Error()
	}
	_, serr := os.Stat(marker)
	r.LimactlCalls = serr == nil
	json.NewEncoder(os.Stdout).Encode(r)
}

// The probe on this machine's real /dev/kvm, as the unprivileged user that would own the
// VM and as root. Where /dev/kvm is 0600 root:root (a fresh Debian host), the VM owner
// gets TCG with the reason and the fix, and lima.accel: kvm fails in well under a second
// naming the device and the user, before limactl runs. Positive control: root opens the
// same device, so the probe's refusal for the other user is the permission, not the
// device; on a PVM host root still gets TCG, for the PVM reason.
func TestHostAccelRealDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the probe as another user")
	}
	st, err := os.Stat(KVMDevice)
	if err != nil {
		t.Skipf("no %s here", KVMDevice)
	}
	sys := st.Sys().(*syscall.Stat_t)
	if st.Mode().Perm()&0o006 != 0 || sys.Uid != 0 {
		t.Skipf("%s is %v uid %d: the unprivileged case needs it closed to others", KVMDevice, st.Mode(), sys.Uid)
	}

	// Root: the device opens and answers.
	root, err := HostAccel("auto")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(root.Why, "cannot open") {
		t.Fatalf("root cannot open %s either: %+v", KVMDevice, root)
	}
	if _, pvmErr := os.Stat("/sys/module/kvm_pvm"); pvmErr == nil {
		if root.Name != "tcg" || !strings.Contains(root.Why, "kvm_pvm") {
			t.Fatalf("PVM host, root: %+v, want tcg for the PVM reason", root)
		}
	} else if root.Name != "kvm" {
		t.Fatalf("root: %+v, want kvm", root)
	}
	t.Logf("as root: %s (%s)", root.Name, root.Why)

	// nobody: the test binary, copied where nobody can run it.
	dir, err := os.MkdirTemp("", "lever-accel-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o777)
	os.Chmod(work, 0o777)
	self, _ := os.Executable()
	exe := filepath.Join(dir, "lima.test")
	copyFile(t, self, exe)
	cmd := exec.Command(exe, "-test.run=^TestAccelChild$", "-test.count=1")
	cmd.Env = []string{accelChildEnv + "=" + work, "PATH=/usr/bin:/bin", "HOME=" + work}
	cmd.Dir = work
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var r accelReport
	if err := json.Unmarshal([]byte(out[:strings.IndexByte(string(out), '\n')+1]), &r); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	wantWhy := "cannot open it read-write (permission denied)"
	if r.AutoErr != "" || r.Auto.Name != "tcg" || !strings.Contains(r.Auto.Why, wantWhy) || !strings.Contains(r.Auto.Why, "user nobody (uid 65534)") ||
		!strings.Contains(r.Auto.Warning, "usermod -aG kvm nobody)") {
		t.Fatalf("nobody, auto: %+v %s", r.Auto, r.AutoErr)
	}
	for _, e := range []string{r.KVMErr, r.UpErr} {
		if !strings.Contains(e, "lima.accel is kvm but /dev/kvm is mode 0600 root:root and user nobody (uid 65534) cannot open it") {
			t.Fatalf("nobody, kvm: error %q does not name the device, its mode and the user", e)
		}
	}
	if r.LimactlCalls || r.UpMillis >= 1000 || len(r.Warnings) != 0 {
		t.Fatalf("lima.accel: kvm: limactl ran=%t after %d ms, warnings %q; want a refusal before limactl in under a second", r.LimactlCalls, r.UpMillis, r.Warnings)
	}
	t.Logf("as nobody: %s; kvm refused in %d ms: %s", r.Auto.Warning, r.UpMillis, r.UpErr)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
