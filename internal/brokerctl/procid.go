package brokerctl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A process's identity is its pid plus a start time and its argv: the start time tells a
// reused pid apart, the argv tells the broker from whatever else runs there. Each kernel
// hands these out its own way (Linux: /proc/<pid>/stat and cmdline; macOS: the
// kern.proc.pid and kern.procargs2 sysctls), so procIdentity sits behind a build-tagged
// file pair (procid_linux.go, procid_darwin.go) that only fetches the raw bytes; the
// parsers below are plain functions tested on any host.

// errExited says the pid names a zombie: it has exited and is not the broker any more.
var errExited = errors.New("process has exited")

// parseProcStat reads the state and start time (clock ticks since boot, field 22) from
// the text of /proc/<pid>/stat.
func parseProcStat(stat []byte) (uint64, error) {
	// comm (field 2) may contain spaces and parentheses; fields resume after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("unexpected format (no comm)")
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("unexpected format (%d fields after comm)", len(f))
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, errExited
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("start time: %w", err)
	}
	return ticks, nil
}

// parseCmdline splits /proc/<pid>/cmdline (NUL-terminated arguments).
func parseCmdline(b []byte) []string {
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// parseProcArgs2 reads argv from the kern.procargs2 buffer of macOS: a 32-bit argc
// (little-endian on both Apple architectures), the executable path, NUL padding, then
// argc NUL-terminated arguments (the environment follows and is ignored).
func parseProcArgs2(b []byte) ([]string, error) {
	if len(b) < 4 {
		return nil, errors.New("procargs2: short buffer")
	}
	argc := int(int32(binary.LittleEndian.Uint32(b)))
	if argc < 0 || argc > len(b) {
		return nil, fmt.Errorf("procargs2: bad argc %d", argc)
	}
	rest := b[4:]
	// The executable path, then its padding.
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return nil, errors.New("procargs2: unterminated executable path")
	}
	rest = rest[i:]
	for len(rest) > 0 && rest[0] == 0 {
		rest = rest[1:]
	}
	argv := make([]string, 0, argc)
	for range argc {
		j := bytes.IndexByte(rest, 0)
		if j < 0 {
			return nil, fmt.Errorf("procargs2: %d of %d arguments", len(argv), argc)
		}
		argv = append(argv, string(rest[:j]))
		rest = rest[j+1:]
	}
	return argv, nil
}

// darwinStartTime folds a process's start time (seconds, microseconds) into the one
// number the pid record keeps.
func darwinStartTime(sec, usec int64) uint64 {
	return uint64(sec)*1_000_000 + uint64(usec)
}
