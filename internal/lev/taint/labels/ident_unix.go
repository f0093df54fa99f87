//go:build unix

package labels

import (
	"os"
	"syscall"
	"time"
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

// fileID is fi's device, inode and status-change time (ctime: set by every write, rename,
// link and chmod, and not settable by a process, unlike mtime).
func fileID(fi os.FileInfo) (dev, ino uint64, ctime time.Time, ok bool) {
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat {
		return 0, 0, time.Time{}, false
	}
	return uint64(st.Dev), uint64(st.Ino), ctimeOf(st), true
}
