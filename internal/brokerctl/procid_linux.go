//go:build linux

package brokerctl

import (
	"fmt"
	"os"
)

// procIdentity reads a live process's start time (clock ticks since boot) and argv from
// /proc. A zombie counts as gone.
func procIdentity(pid int) (uint64, []string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, nil, err
	}
	ticks, err := parseProcStat(stat)
	if err != nil {
		return 0, nil, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, nil, err
	}
	return ticks, parseCmdline(cmdline), nil
}
