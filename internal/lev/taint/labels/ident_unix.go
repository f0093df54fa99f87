//go:build unix

package labels

import (
	"os"
	"syscall"
)

// identity is path's device and inode, following symlinks (the file tools act on real
// paths).
func identity(path string) (dev, ino uint64, ok bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, false
	}
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat {
		return 0, 0, false
	}
	return uint64(st.Dev), uint64(st.Ino), true
}
