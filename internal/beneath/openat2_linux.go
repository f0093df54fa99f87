package beneath

import "golang.org/x/sys/unix"

// forceWalk makes open take the portable walk (tests cover it on Linux too).
var forceWalk = false

// openat2 opens rel beneath dirfd in one call: the kernel refuses ".." out of dirfd, an
// absolute symlink and every symlink on the way (ELOOP, EXDEV). ENOSYS on a kernel
// before 5.6, or when forceWalk: open walks then.
func openat2(dirfd int, rel string, flags int, perm uint32) (int, error) {
	if forceWalk {
		return -1, unix.ENOSYS
	}
	how := unix.OpenHow{
		Flags:   uint64(flags),
		Mode:    uint64(perm),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	// EAGAIN: a rename raced the lookup and the kernel asks to retry; a few times, not
	// forever (an agent renaming in a loop must not hold lever here).
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, rel, &how)
		if (err == unix.EINTR || err == unix.EAGAIN) && i < 16 {
			continue
		}
		return fd, err
	}
}
