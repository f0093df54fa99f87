//go:build darwin

package brokerctl

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// sZomb is the zombie state of struct extern_proc's p_stat (sys/proc.h).
const sZomb = 5

// procIdentity reads a live process's start time (microseconds since the epoch) and argv
// from the kernel's sysctls; macOS has no /proc. A zombie counts as gone.
func procIdentity(pid int) (uint64, []string, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return 0, nil, fmt.Errorf("pid %d: kern.proc.pid: %w", pid, err)
	}
	// A pid that does not exist comes back as an all-zero record, not an error.
	if int(kp.Proc.P_pid) != pid {
		return 0, nil, fmt.Errorf("pid %d: no such process", pid)
	}
	if kp.Proc.P_stat == sZomb {
		return 0, nil, fmt.Errorf("pid %d: %w", pid, errExited)
	}
	raw, err := unix.SysctlRaw("kern.procargs2", pid)
	if err != nil {
		return 0, nil, fmt.Errorf("pid %d: kern.procargs2: %w", pid, err)
	}
	argv, err := parseProcArgs2(raw)
	if err != nil {
		return 0, nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	st := kp.Proc.P_starttime
	return darwinStartTime(int64(st.Sec), int64(st.Usec)), argv, nil
}
