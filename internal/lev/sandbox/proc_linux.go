package sandbox

import (
	"fmt"
	"syscall"
)

// prctlNotDumpable makes the calling process non-dumpable: its /proc files are root's, so
// a command in the container (capabilities dropped) cannot open the keep-alive's pipe.
func prctlNotDumpable() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", e)
	}
	return nil
}
