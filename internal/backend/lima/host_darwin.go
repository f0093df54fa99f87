//go:build darwin

package lima

import "golang.org/x/sys/unix"

// hostFacts returns the macOS product version (kern.osproductversion, e.g. "14.5"); empty
// when the kernel does not say, which makes the template fall back to qemu.
func hostFacts() string {
	v, err := unix.Sysctl("kern.osproductversion")
	if err != nil {
		return ""
	}
	return v
}
