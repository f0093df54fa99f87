//go:build linux

package lima

import (
	"io/fs"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// kvmGetAPIVersion is KVM_GET_API_VERSION, _IO(KVMIO=0xAE, 0x00).
const kvmGetAPIVersion = 0xAE00

// hostKVM probes the real /dev/kvm as the process lever runs as: that user owns the VM
// (limactl refuses root), so its permissions are the ones qemu will have.
type hostKVM struct{}

func (hostKVM) stat(path string) (fs.FileMode, string, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, "", "", err
	}
	owner, group := "?", "?"
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		owner, group = strconv.Itoa(int(s.Uid)), strconv.Itoa(int(s.Gid))
		if u, err := user.LookupId(owner); err == nil {
			owner = u.Username
		}
		if g, err := user.LookupGroupId(group); err == nil {
			group = g.Name
		}
	}
	return st.Mode(), owner, group, nil
}

func (hostKVM) openAPIVersion(path string) (int, error, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: err}, nil
	}
	defer unix.Close(fd)
	v, err := unix.IoctlRetInt(fd, kvmGetAPIVersion)
	if err != nil {
		return 0, nil, err
	}
	return v, nil, nil
}

// pvm: the kvm_pvm module registers /dev/kvm for PVM (measured on this project's machines:
// KVM_CREATE_VM succeeds but a stock kernel hangs), and shows in /sys/module.
func (hostKVM) pvm() bool {
	_, err := os.Stat("/sys/module/kvm_pvm")
	return err == nil
}

func (hostKVM) user() (string, int) {
	uid := os.Getuid()
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username, uid
	}
	return "", uid
}

// HostAccel decides the accelerator for lima.accel on this Linux host.
func HostAccel(setting string) (Accel, error) { return decideAccel(setting, hostKVM{}) }
