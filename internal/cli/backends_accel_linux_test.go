//go:build linux

package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const backendsChildEnv = "LEVER_CLI_BACKENDS_CHILD"

// TestBackendsChild runs `lever backends --json` through Main and prints its output; it
// is TestBackendsAccelAsVMOwner's child and does nothing in a normal run.
func TestBackendsChild(t *testing.T) {
	if os.Getenv(backendsChildEnv) == "" {
		t.Skip("runs only as TestBackendsAccelAsVMOwner's child")
	}
	var out bytes.Buffer
	if code := Main([]string{"backends", "--json"}, &out, os.Stderr); code != 0 {
		t.Fatalf("lever backends --json exited %d", code)
	}
	os.Stdout.Write(out.Bytes())
}

// `lever backends --json` shows the accelerator lima.accel: auto would use and why, probed
// as the user running lever. On a host whose /dev/kvm is 0600 root:root the unprivileged
// VM owner is shown TCG with the permission reason; root (positive control: same device,
// same command) can open it, so its reason is never the permission.
func TestBackendsAccelAsVMOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run lever backends as another user")
	}
	st, err := os.Stat("/dev/kvm")
	if err != nil || st.Mode().Perm()&0o066 != 0 {
		t.Skip("needs a /dev/kvm closed to group and others")
	}
	dir, err := os.MkdirTemp("", "lever-backends-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	self, _ := os.Executable()
	exe := filepath.Join(dir, "cli.test")
	in, _ := os.Open(self)
	outf, _ := os.OpenFile(exe, os.O_CREATE|os.O_WRONLY, 0o755)
	io.Copy(outf, in)
	in.Close()
	if err := outf.Close(); err != nil {
		t.Fatal(err)
	}
	limaRow := func(uid uint32) backendRowAccel {
		t.Helper()
		cmd := exec.Command(exe, "-test.run=^TestBackendsChild$", "-test.count=1")
		cmd.Env = []string{backendsChildEnv + "=1", "PATH=/usr/bin:/bin", "HOME=" + dir}
		cmd.Dir = dir
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("uid %d: %v\n%s", uid, err, out)
		}
		var m struct {
			Backends []struct {
				Name      string          `json:"name"`
				Available backendRowAccel `json:"available"`
			} `json:"backends"`
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("uid %d: %v\n%s", uid, err, out)
		}
		for _, r := range m.Backends {
			if r.Name == "lima" {
				return r.Available
			}
		}
		t.Fatalf("no lima row in %s", out)
		return backendRowAccel{}
	}
	nobody := limaRow(65534)
	if nobody.Accelerator != "tcg" || !strings.Contains(nobody.Why, "/dev/kvm is mode 0600 root:root and user nobody (uid 65534) cannot open it read-write (permission denied)") {
		t.Fatalf("nobody: %+v", nobody)
	}
	root := limaRow(0)
	if root.Accelerator == "" || strings.Contains(root.Why, "cannot open") {
		t.Fatalf("root: %+v", root)
	}
	t.Logf("nobody: %s (%s); root: %s (%s)", nobody.Accelerator, nobody.Why, root.Accelerator, root.Why)
}

type backendRowAccel struct {
	Accelerator string `json:"accelerator"`
	Why         string `json:"accelerator_reason"`
}
