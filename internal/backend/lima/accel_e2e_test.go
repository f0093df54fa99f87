//go:build e2e && linux

package lima

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// `lever up` (the built binary) as the unprivileged VM owner on a host whose /dev/kvm it
// cannot open: lima.accel: kvm fails at once (under a second on an idle machine; the
// bound allows for a loaded one) naming the device, its mode and the user, before limactl
// runs; auto prints exactly one warning line and goes on to
// limactl (the positive control that the same config reaches the backend); tcg goes on
// without a warning. limactl is a recorder that answers --version and then garbage, so
// nothing boots.
func TestLeverUpAccelE2E(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run lever as another user")
	}
	st, err := os.Stat(KVMDevice)
	if err != nil || st.Mode().Perm()&0o066 != 0 {
		t.Skip("needs a /dev/kvm closed to group and others (a fresh Debian host)")
	}
	w, err := os.MkdirTemp("", "lever-accel-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(w)
	for _, p := range []struct{ out, pkg string }{{"lever", "./cmd/lever"}, {"lev", "./cmd/lev"}} {
		c := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-tags", "remote,exclude_graphdriver_btrfs,btrfs_noversion,exclude_graphdriver_devicemapper,containers_image_openpgp", "-o", filepath.Join(w, p.out), p.pkg)
		c.Dir = "../../.."
		c.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", p.out, err, out)
		}
	}
	for _, d := range []string{"project/docs", "home/.config/lever", "img"} {
		os.MkdirAll(filepath.Join(w, d), 0o755)
	}
	os.WriteFile(filepath.Join(w, "home/.config/lever/api-key"), []byte("sk-test\n"), 0o600)
	os.WriteFile(filepath.Join(w, "img/disk.qcow2"), nil, 0o644)
	marker := filepath.Join(w, "limactl-ran")
	os.WriteFile(filepath.Join(w, "limactl"), []byte("#!/bin/sh\ntouch "+marker+"\ncase \"$1\" in --version) echo limactl version 1.2.2;; *) echo nonsense;; esac\n"), 0o755)
	example, err := os.ReadFile("../../../examples/hello/lever.yaml")
	if err != nil {
		t.Fatal(err)
	}
	filepath.Walk(w, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	os.Chmod(w, 0o755)

	for _, tc := range []struct {
		accel    string
		wantErr  string
		warnings int
		limactl  bool
	}{
		{"kvm", "lima.accel is kvm but /dev/kvm is mode 0600 root:root and user nobody (uid 65534) cannot open it read-write (permission denied)", 0, false},
		{"auto", "parsing limactl list --json", 1, true},
		{"tcg", "parsing limactl list --json", 0, true},
	} {
		t.Run(tc.accel, func(t *testing.T) {
			os.Remove(marker)
			cfg := string(example) + "lima:\n  image: " + w + "/img/disk.qcow2\n  limactl: " + w + "/limactl\n  accel: " + tc.accel + "\n"
			os.WriteFile(filepath.Join(w, "project/lever.yaml"), []byte(cfg), 0o644)
			cmd := exec.Command(filepath.Join(w, "lever"), "up", "--yes", "-c", "lever.yaml")
			cmd.Dir = filepath.Join(w, "project")
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + w + "/home", "LEVER_STATE_DIR=" + w + "/state", "LEVER_LEV_BINARY=" + w + "/lev"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			all := stdout.String() + stderr.String()
			if err == nil || !strings.Contains(all, tc.wantErr) {
				t.Fatalf("lever up: %v, output:\n%s\nwant it to fail with %q", err, all, tc.wantErr)
			}
			if n := strings.Count(all, "warning: lima.accel auto: using TCG"); n != tc.warnings {
				t.Errorf("%d warning lines, want %d:\n%s", n, tc.warnings, all)
			}
			_, merr := os.Stat(marker)
			if (merr == nil) != tc.limactl {
				t.Errorf("limactl ran: %t, want %t", merr == nil, tc.limactl)
			}
			// Promptly: before anything slow (limactl, the marker above, never ran). The
			// bound has room for a start of the binary on a loaded machine; a refusal
			// that came only after a wait on the backend would take far longer.
			if tc.accel == "kvm" && took >= 5*time.Second {
				t.Errorf("lima.accel: kvm refused after %v, want within a few seconds", took)
			}
			t.Logf("accel %s: %v in %v", tc.accel, err, took.Round(time.Millisecond))
		})
	}
}
