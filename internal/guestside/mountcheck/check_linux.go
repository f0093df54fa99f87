//go:build linux

package mountcheck

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Check proves req against the live container: its process must be in a mount namespace
// of its own (a pid that named a process of the guest's would compare the guest's tree
// with itself and prove nothing).
func Check(req Request) error {
	if req.Pid <= 0 {
		return fmt.Errorf("mount check: no container process (pid %d)", req.Pid)
	}
	proc := fmt.Sprintf("/proc/%d", req.Pid)
	var self, theirs unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &self); err != nil {
		return fmt.Errorf("mount check: reading this helper's mount namespace: %w", err)
	}
	if err := unix.Stat(proc+"/ns/mnt", &theirs); err != nil {
		return fmt.Errorf("mount check: container process %d: %w", req.Pid, err)
	}
	if self.Dev == theirs.Dev && self.Ino == theirs.Ino {
		return fmt.Errorf("mount check: process %d shares the guest's mount namespace: it is not a container's", req.Pid)
	}
	return check(req, proc+"/root", true)
}

// check proves req against the container root at root (a /proc/PID/root, or a plain
// directory in tests, where nothing is a mount point: mountRoots false).
func check(req Request, root string, mountRoots bool) error {
	if err := validate(req); err != nil {
		return err
	}
	// The tree is lever's own guest path (a mount point the agents cannot replace):
	// opened once, as given.
	tree, err := unix.Open(req.Tree, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mount check: opening the tree %s: %w", req.Tree, err)
	}
	defer unix.Close(tree)
	croot, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mount check: opening the container's root %s: %w", root, err)
	}
	defer unix.Close(croot)
	for _, m := range req.Mounts {
		src := filepath.Join(req.Tree, m.Rel)
		want, err := statBeneath(tree, m.Rel, unix.RESOLVE_BENEATH|unix.RESOLVE_NO_SYMLINKS)
		switch {
		case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV):
			where, rerr := filepath.EvalSymlinks(src)
			if rerr != nil {
				where = "somewhere else"
			}
			return fmt.Errorf("mount source %s resolves to %s through a symlink", src, where)
		case errors.Is(err, unix.ENOENT):
			return fmt.Errorf("mount source %s is missing", src)
		case errors.Is(err, unix.ENOSYS):
			return fmt.Errorf("mount check: the guest's kernel has no openat2 (Linux 5.6 or later is needed)")
		case err != nil:
			return fmt.Errorf("mount check: opening %s: %w", src, err)
		}
		// Inside the container's root, symlinks resolve there (IN_ROOT) and none is
		// expected on lever's own mount points (NO_SYMLINKS).
		fd, err := unix.Openat2(croot, strings.TrimPrefix(m.Dest, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			return fmt.Errorf("mount check: the container's %s: %w", m.Dest, err)
		}
		err = proveDest(fd, m, src, want, mountRoots)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// proveDest proves what the container holds at m.Dest (open as fd) is the tree's file
// want, mounted there.
//
// The inode alone is not enough: the runtime resolves the destination too, inside the
// container, and a nested mount point's parent is the writable tree. A symlink put at
// tree/docs to /tmp while the runtime mounts a read-only docs sends the source and the
// destination both to /tmp (the guest's /tmp mounted over the container's); with the
// directory put back, the container's /lever/docs is the tree's docs again, seen through
// the writable tree, with no mount on it. So the destination must be the root of a mount,
// and read-only when planned so.
func proveDest(fd int, m Mount, src string, want unix.Stat_t, mountRoots bool) error {
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil {
		return fmt.Errorf("mount check: the container's %s: %w", m.Dest, err)
	}
	if want.Dev != got.Dev || want.Ino != got.Ino {
		return fmt.Errorf("the container's %s is not the tree's %s: the runtime mounted another file than the one there now (a symlink put in its place after the last check, and taken away)", m.Dest, src)
	}
	if mountRoots {
		var stx unix.Statx_t
		if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx); err != nil {
			return fmt.Errorf("mount check: the container's %s: %w", m.Dest, err)
		}
		if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
			return fmt.Errorf("mount check: the guest's kernel cannot tell a mount point (statx STATX_ATTR_MOUNT_ROOT: Linux 5.8 or later is needed)")
		}
		if stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
			return fmt.Errorf("the container's %s is not a mount point: the runtime mounted %s somewhere else (a symlink put on the way to it after the last check, and taken away)", m.Dest, src)
		}
	}
	if m.ReadOnly {
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fd, &fs); err != nil {
			return fmt.Errorf("mount check: the container's %s: %w", m.Dest, err)
		}
		if fs.Flags&unix.ST_RDONLY == 0 {
			return fmt.Errorf("the container's %s is writable, and was planned read-only", m.Dest)
		}
	}
	return nil
}

// statBeneath opens rel below dir with resolve's rules (O_PATH: no permission on the
// file itself is needed, and nothing is read) and stats what it found. A "." is dir.
// No O_NOFOLLOW: with it a trailing symlink would be opened as itself, not refused.
func statBeneath(dir int, rel string, resolve uint64) (unix.Stat_t, error) {
	var st unix.Stat_t
	if rel == "." || rel == "" {
		return st, unix.Fstat(dir, &st)
	}
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	return st, unix.Fstat(fd, &st)
}
