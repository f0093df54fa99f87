package lima

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
)

// Host is what the template needs to know about the machine lever runs on. It reaches the
// renderer through one seam (hostFacts, in host_darwin.go and host_other.go), so rendering
// stays a pure function of lever.yaml and these facts and every combination is tested on
// any machine.
type Host struct {
	OS   string // runtime.GOOS
	Arch string // runtime.GOARCH
	// MacOSVersion is the product version ("14.5") on darwin; empty elsewhere or unknown.
	MacOSVersion string
}

// CurrentHost reads the running machine's facts.
func CurrentHost() Host {
	return Host{OS: runtime.GOOS, Arch: runtime.GOARCH, MacOSVersion: hostFacts()}
}

// Platform is how the VM is built on a host: Lima's vmType, the guest architecture, the
// tree's mount type, and what the guest reports for that mount.
type Platform struct {
	VMType    string // "vz" or "qemu"
	Arch      string // Lima's name: "aarch64" or "x86_64"
	MountType string // "virtiofs" under vz, "reverse-sshfs" otherwise
	// GuestFSType is the tree mount's type as the guest's findmnt prints it.
	GuestFSType string
	// Console is the guest kernel's console device for direct kernel boot.
	Console string
	// QemuBinary is the qemu-system executable Lima runs (empty under vz).
	QemuBinary string
}

// GOARCH is the guest architecture in Go's spelling (Lima's "aarch64" is "arm64").
func (p Platform) GOARCH() (string, error) {
	switch p.Arch {
	case "aarch64":
		return "arm64", nil
	case "x86_64":
		return "amd64", nil
	}
	return "", fmt.Errorf("lima backend: template architecture %q has no lev build", p.Arch)
}

// vzMinMacOS is the first macOS whose Virtualization.framework has what Lima's vz driver
// needs (virtiofs shares and Linux boot on both architectures): macOS 13 Ventura.
const vzMinMacOS = 13

// PlatformFor picks the VM type, architecture and mount type for h. The guest always has
// the host's architecture: emulating another one under TCG is too slow to be useful.
func PlatformFor(h Host) (Platform, error) {
	var p Platform
	switch h.Arch {
	case "arm64":
		p.Arch = "aarch64"
	case "amd64":
		p.Arch = "x86_64"
	default:
		return p, fmt.Errorf("lima backend: host architecture %q is not supported (arm64 or amd64)", h.Arch)
	}
	switch h.OS {
	case "darwin", "linux":
	default:
		return p, fmt.Errorf("lima backend: host OS %q is not supported (darwin or linux)", h.OS)
	}
	if h.OS == "darwin" && macOSMajor(h.MacOSVersion) >= vzMinMacOS {
		// Apple's hypervisor with a virtiofs share: no qemu, no sftp server on the host.
		// virtiofs hands symlinks to the guest to resolve in the guest's own tree, so a link
		// planted in the tree cannot reach host files (reverse-sshfs needs followSymlinks off
		// for that).
		p.VMType, p.MountType, p.GuestFSType, p.Console = "vz", "virtiofs", "virtiofs", "hvc0"
		return p, nil
	}
	p.VMType, p.MountType, p.GuestFSType = "qemu", "reverse-sshfs", "fuse.sshfs"
	p.QemuBinary = "qemu-system-" + p.Arch
	if p.Arch == "aarch64" {
		p.Console = "ttyAMA0"
	} else {
		p.Console = "ttyS0"
	}
	return p, nil
}

// macOSMajor reads the major number of a macOS product version ("13.6.1" -> 13); 0 when
// unknown, which selects qemu: a wrong "yes" would fail at VM start, a wrong "no" only
// costs speed.
func macOSMajor(v string) int {
	major, _, _ := strings.Cut(strings.TrimSpace(v), ".")
	n, err := strconv.Atoi(major)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
