//go:build !linux

package lima

import "fmt"

// HostAccel off Linux: Lima picks Apple's hypervisor itself (vz, or hvf under qemu), so
// only auto is meaningful; kvm and tcg name Linux mechanisms and are refused.
func HostAccel(setting string) (Accel, error) {
	switch setting {
	case "auto", "":
		plat, err := PlatformFor(CurrentHost())
		if err != nil {
			return Accel{}, err
		}
		if plat.VMType == "vz" {
			return Accel{Name: "vz", Why: "macOS Virtualization.framework (Lima vmType vz)"}, nil
		}
		return Accel{Name: "hvf", Why: "qemu with Hypervisor.framework (macOS before 13)"}, nil
	}
	return Accel{}, fmt.Errorf("lima.accel: %q applies to Linux hosts only; on macOS leave it auto (Lima uses vz or hvf)", setting)
}
