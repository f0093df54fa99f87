// Package runas sheds root for lev's guest helpers: a helper started as root does its
// root-only part first, then becomes the run user before it touches anything the run user
// (or a process escaped from a rootless container) controls, such as paths on the run
// user's tmpfs or the run user's podman socket. It must not import anything of lever's.
package runas

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// Become switches the whole process (every thread) to uid and its primary group, with no
// supplementary groups. Already uid: nothing to do. Neither root nor uid: an error.
func Become(uid int) error {
	if os.Geteuid() == uid {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("guest helper runs as uid %d, neither root nor the run user %d", os.Geteuid(), uid)
	}
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return fmt.Errorf("looking up the run user %d: %w", uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return fmt.Errorf("run user %d has a bad gid %q", uid, u.Gid)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("dropping supplementary groups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("switching to gid %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("switching to uid %d: %w", uid, err)
	}
	return nil
}
