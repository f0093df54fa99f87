//go:build !linux

package beneath

import "golang.org/x/sys/unix"

// forceWalk is the Linux file's test switch; here the walk is the only way, so it changes
// nothing (the tests set it on every platform).
var forceWalk = false

// openat2 is Linux's; elsewhere open walks one name at a time with O_NOFOLLOW.
func openat2(int, string, int, uint32) (int, error) { return -1, unix.ENOSYS }
