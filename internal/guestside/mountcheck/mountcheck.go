// Package mountcheck proves, as root in the guest, that a container the runtime has set
// up but not yet started holds at each of its in-tree mount points exactly the file or
// directory the tree holds at that path, reached without a symlink.
//
// Why after set-up and not before: the runtime resolves a bind mount's source when it
// mounts it, and the agents write the tree. A check of the source before the start leaves
// a window in which a running agent (the manager, while a worker is recreated) can swap a
// worker's dir for a symlink to the run user's runtime dir and back; the runtime then
// mounts the symlink's target and a check made before sees only the directory. Here the
// mounts are already made (podman init: the container's process exists, waiting, and has
// run nothing), so what is compared is what the container will see: the source, opened
// beneath the tree with no symlink allowed anywhere on the way, must be the very inode
// (device and inode number) found at the destination inside the container's root.
package mountcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Request names the container's process (its pid in the guest, from podman inspect
// after init), the tree's path in the guest, and the mounts to prove.
type Request struct {
	Pid    int     `json:"pid"`
	Tree   string  `json:"tree"`
	Mounts []Mount `json:"mounts"`
}

// Mount is one bind mount of a path in the tree: Rel is the source relative to the tree
// ("." for the tree itself), Dest where the container has it, ReadOnly whether it was
// planned read-only.
type Mount struct {
	Rel      string `json:"rel"`
	Dest     string `json:"dest"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Serve reads a Request (strict JSON) from r and proves it; the error says which mount
// failed and how. It writes nothing on success.
func Serve(r io.Reader, _ io.Writer) error {
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	dec.DisallowUnknownFields()
	var req Request
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("mount check: reading the request: %w", err)
	}
	return Check(req)
}

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
	if !path.IsAbs(req.Tree) {
		return fmt.Errorf("mount check: the tree %q is not an absolute path", req.Tree)
	}
	for _, m := range req.Mounts {
		if m.Rel != "." && (m.Rel == "" || path.IsAbs(m.Rel) || path.Clean(m.Rel) != m.Rel || m.Rel == ".." || strings.HasPrefix(m.Rel, "../")) {
			return fmt.Errorf("mount check: %q is not a clean path below the tree", m.Rel)
		}
		if !path.IsAbs(m.Dest) || path.Clean(m.Dest) != m.Dest {
			return fmt.Errorf("mount check: %q is not a clean absolute path in the container", m.Dest)
		}
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
