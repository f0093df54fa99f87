package lima

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

// fakeKVM is the seam's stand-in: each field is one answer the host could give.
type fakeKVM struct {
	statErr    error
	mode       fs.FileMode
	owner, grp string
	openErr    error
	ioctlErr   error
	version    int
	isPVM      bool
	probed     *bool // set when anything touches the device
}

func (f fakeKVM) stat(string) (fs.FileMode, string, string, error) {
	if f.probed != nil {
		*f.probed = true
	}
	return f.mode, f.owner, f.grp, f.statErr
}
func (f fakeKVM) openAPIVersion(path string) (int, error, error) {
	if f.openErr != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: f.openErr}, nil
	}
	return f.version, nil, f.ioctlErr
}
func (f fakeKVM) pvm() bool           { return f.isPVM }
func (f fakeKVM) user() (string, int) { return "alice", 1000 }

func TestDecideAccel(t *testing.T) {
	usable := fakeKVM{mode: fs.ModeDevice | fs.ModeCharDevice | 0o660, owner: "root", grp: "kvm", version: 12}
	locked := fakeKVM{mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, owner: "root", grp: "root", openErr: syscall.EACCES}
	groupOnly := fakeKVM{mode: fs.ModeDevice | fs.ModeCharDevice | 0o660, owner: "root", grp: "kvm", openErr: syscall.EACCES}
	missing := fakeKVM{statErr: &fs.PathError{Op: "stat", Path: "/dev/kvm", Err: syscall.ENOENT}}
	ioctlFails := usable
	ioctlFails.ioctlErr = syscall.ENOTTY
	oddVersion := usable
	oddVersion.version = 11
	pvm := usable
	pvm.isPVM = true
	busy := usable
	busy.openErr = syscall.ENXIO

	for _, tc := range []struct {
		name, setting string
		ops           fakeKVM
		want          string   // accelerator chosen; "" = error
		contains      []string // in Why+Warning, or in the error
	}{
		// Positive controls: a device this user can open and that answers is used.
		{"usable auto", "auto", usable, "kvm", []string{"opens read-write for user alice (uid 1000)", "KVM_GET_API_VERSION (12)"}},
		{"usable kvm", "kvm", usable, "kvm", []string{"opens read-write"}},
		{"missing auto", "auto", missing, "tcg", []string{"warning: lima.accel auto: using TCG", "/dev/kvm does not exist", "load kvm_intel or kvm_amd"}},
		{"missing kvm", "kvm", missing, "", []string{"lima.accel is kvm but /dev/kvm does not exist"}},
		// This machine's case: 0600 root:root, the VM owner cannot open it.
		{"EACCES auto", "auto", locked, "tcg", []string{"/dev/kvm is mode 0600 root:root and user alice (uid 1000) cannot open it read-write (permission denied)",
			"chgrp kvm /dev/kvm && chmod 0660 /dev/kvm", "usermod -aG kvm alice)"}},
		{"EACCES kvm", "kvm", locked, "", []string{"lima.accel is kvm but /dev/kvm is mode 0600 root:root and user alice (uid 1000) cannot open it", "set lima.accel: auto"}},
		{"EACCES group-accessible", "auto", groupOnly, "tcg", []string{"mode 0660 root:kvm", "add alice to the kvm group (usermod -aG kvm alice)"}},
		{"open other error", "auto", busy, "tcg", []string{"opening it as user alice (uid 1000) fails (no such device or address)"}},
		{"ioctl fails auto", "auto", ioctlFails, "tcg", []string{"KVM_GET_API_VERSION fails (inappropriate ioctl for device)"}},
		{"ioctl fails kvm", "kvm", ioctlFails, "", []string{"lima.accel is kvm but /dev/kvm opens for user alice (uid 1000) but KVM_GET_API_VERSION fails"}},
		{"wrong API version", "auto", oddVersion, "tcg", []string{"KVM API version 11, qemu needs 12"}},
		// PVM: the device works but a stock kernel hangs; auto avoids it, an explicit kvm is obeyed.
		{"pvm auto", "auto", pvm, "tcg", []string{"kvm_pvm (PVM)", "stock guest kernel hangs"}},
		{"pvm kvm", "kvm", pvm, "kvm", []string{"lima.accel is kvm; note:", "kvm_pvm"}},
		{"bad setting", "hvf", usable, "", []string{`lima.accel: "hvf" is not an accelerator: use auto, kvm or tcg`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decideAccel(tc.setting, tc.ops)
			text := got.Why + " | " + got.Warning
			if tc.want == "" {
				if err == nil {
					t.Fatalf("no error; chose %+v", got)
				}
				text = err.Error()
			} else if err != nil || got.Name != tc.want {
				t.Fatalf("got %+v, %v; want %s", got, err, tc.want)
			}
			for _, c := range tc.contains {
				if !strings.Contains(text, c) {
					t.Errorf("%q does not contain %q", text, c)
				}
			}
			// The fallback warning is one line, and only auto's TCG fallback has one.
			if strings.Contains(got.Warning, "\n") || (got.Warning != "") != (tc.setting == "auto" && got.Name == "tcg") {
				t.Errorf("warning %q for %s -> %s", got.Warning, tc.setting, got.Name)
			}
			var unusable *kvmUnusableError
			if tc.setting == "kvm" && tc.want == "" && !errors.As(err, &unusable) {
				t.Errorf("error %v is not a kvmUnusableError", err)
			}
		})
	}
	// tcg never looks at the device.
	probed := false
	if got, err := decideAccel("tcg", fakeKVM{probed: &probed}); err != nil || got.Name != "tcg" || probed {
		t.Fatalf("tcg: %+v %v probed=%t", got, err, probed)
	}
}
