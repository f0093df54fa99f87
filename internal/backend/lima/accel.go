package lima

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// KVMDevice is the device qemu opens for KVM.
const KVMDevice = "/dev/kvm"

// kvmAPIVersion is the only KVM API version there has ever been (KVM_API_VERSION); qemu
// refuses any other answer.
const kvmAPIVersion = 12

// Accel is the accelerator the VM will run under and why.
type Accel struct {
	Name string `json:"name"` // "kvm", "tcg", or Lima's own choice off Linux ("vz", "hvf")
	Why  string `json:"why"`
	// Warning is the one line lever up prints when auto fell back to TCG: why KVM is not
	// used and how to get it.
	Warning string `json:"warning,omitempty"`
}

// kvmOps is the seam between the accelerator decision and the host: everything the
// decision needs to know about /dev/kvm and the user lever runs as. accel_linux.go has
// the real one; the tests drive decideAccel with a table of fakes.
type kvmOps interface {
	// stat describes the device node: its mode and owner (names resolved when possible).
	stat(path string) (mode fs.FileMode, owner, group string, err error)
	// open opens the device read-write as this process (the VM's owner) and closes it
	// after asking KVM_GET_API_VERSION; it returns the version.
	openAPIVersion(path string) (version int, openErr, ioctlErr error)
	// pvm says whether /dev/kvm is provided by the PVM module (kvm_pvm), under which a
	// stock guest kernel hangs at boot.
	pvm() bool
	// user is the user lever runs as (the VM's owner): login name ("" when unknown), uid.
	user() (login string, uid int)
}

// kvmUnusableError is lima.accel: kvm that cannot work here. New keeps it for EnsureUp to
// return (stop and destroy still work); any other accelerator error fails New.
type kvmUnusableError struct{ msg string }

func (e *kvmUnusableError) Error() string { return e.msg }

// describeUser is "alice (uid 1000)", or "uid 1000" without a name.
func describeUser(ops kvmOps) string {
	login, uid := ops.user()
	if login == "" {
		return fmt.Sprintf("uid %d", uid)
	}
	return fmt.Sprintf("%s (uid %d)", login, uid)
}

// loginOf is what usermod takes: the name, else the uid.
func loginOf(ops kvmOps) string {
	login, uid := ops.user()
	if login == "" {
		return fmt.Sprint(uid)
	}
	return login
}

// decideAccel applies lima.accel (auto, kvm or tcg) to what the probe finds. auto picks KVM
// only when the VM's owner can open /dev/kvm read-write and it answers the API version
// ioctl (and is not PVM); otherwise TCG with a warning. kvm insists and fails with the
// reason instead. tcg never probes.
func decideAccel(setting string, ops kvmOps) (Accel, error) {
	switch setting {
	case "tcg":
		return Accel{Name: "tcg", Why: "lima.accel is tcg (qemu software emulation through lever's wrapper)"}, nil
	case "auto", "", "kvm":
	default:
		return Accel{}, fmt.Errorf("lima.accel: %q is not an accelerator: use auto, kvm or tcg", setting)
	}
	reason, how, pvm := probeKVM(ops)
	if reason == "" {
		return Accel{Name: "kvm", Why: fmt.Sprintf("%s opens read-write for user %s and answers KVM_GET_API_VERSION (%d)", KVMDevice, describeUser(ops), kvmAPIVersion)}, nil
	}
	if setting == "kvm" {
		if pvm {
			// The operator insists and the device works: a PVM-aware guest kernel can run.
			return Accel{Name: "kvm", Why: "lima.accel is kvm; note: " + reason}, nil
		}
		return Accel{}, &kvmUnusableError{fmt.Sprintf("lima.accel is kvm but %s: %s (or set lima.accel: auto to fall back to TCG)", reason, how)}
	}
	return Accel{
		Name:    "tcg",
		Why:     reason,
		Warning: fmt.Sprintf("warning: lima.accel auto: using TCG (software emulation, several times slower) because %s; to use KVM, %s", reason, how),
	}, nil
}

// probeKVM returns why KVM cannot be used (empty when it can) and how to fix that; pvm is
// set when the device works but is PVM.
func probeKVM(ops kvmOps) (reason, how string, pvm bool) {
	u := describeUser(ops)
	mode, owner, group, err := ops.stat(KVMDevice)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return KVMDevice + " does not exist (no KVM module loaded, or this host is a VM without nested virtualisation)",
				"load kvm_intel or kvm_amd, or enable nested virtualisation for this machine", false
		}
		return fmt.Sprintf("%s cannot be examined (%v)", KVMDevice, err), "check " + KVMDevice, false
	}
	desc := fmt.Sprintf("%s is mode %04o %s:%s", KVMDevice, mode.Perm(), owner, group)
	v, openErr, ioctlErr := ops.openAPIVersion(KVMDevice)
	switch {
	case openErr != nil && (errors.Is(openErr, fs.ErrPermission)):
		return fmt.Sprintf("%s and user %s cannot open it read-write (%v)", desc, u, unwrapPathErr(openErr)), groupHint(mode, group, loginOf(ops)), false
	case openErr != nil:
		return fmt.Sprintf("%s and opening it as user %s fails (%v)", desc, u, unwrapPathErr(openErr)), "check that the KVM module is loaded and working", false
	case ioctlErr != nil:
		return fmt.Sprintf("%s opens for user %s but KVM_GET_API_VERSION fails (%v)", KVMDevice, u, ioctlErr), "check that the KVM module is loaded and working", false
	case v != kvmAPIVersion:
		return fmt.Sprintf("%s answers KVM API version %d, qemu needs %d", KVMDevice, v, kvmAPIVersion), "use a kernel with standard KVM", false
	case ops.pvm():
		return fmt.Sprintf("%s is provided by kvm_pvm (PVM), under which a stock guest kernel hangs at boot", KVMDevice),
			"boot the host with kvm_intel or kvm_amd instead of kvm_pvm, or set lima.accel: kvm with a PVM-enabled guest kernel", true
	}
	return "", "", false
}

// groupHint says how the user gets read-write access to the device.
func groupHint(mode fs.FileMode, group, user string) string {
	if mode.Perm()&0o060 == 0o060 && group != "root" && group != "" {
		return fmt.Sprintf("add %s to the %s group (usermod -aG %s %s) and log in again", user, group, group, user)
	}
	return fmt.Sprintf("give %s to the kvm group with mode 0660 (chgrp kvm %s && chmod 0660 %s, or a udev rule) and add the user to it (usermod -aG kvm %s), then log in again",
		KVMDevice, KVMDevice, KVMDevice, user)
}

// unwrapPathErr drops the path from an *fs.PathError (the message already names it).
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// qemuEnvVar is the variable Lima reads for the qemu binary of a guest architecture
// (QEMU_SYSTEM_X86_64, QEMU_SYSTEM_AARCH64).
func qemuEnvVar(arch string) string { return "QEMU_SYSTEM_" + strings.ToUpper(arch) }
