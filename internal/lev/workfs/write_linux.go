package workfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/fspath"
	"golang.org/x/sys/unix"
)

// openWrite opens rel (a.Real beneath the workdir) for writing with rw (O_WRONLY or
// O_RDWR), creating it and its missing parent directories when create is set.
//
// A check of the path by name (ResolveWrite) says nothing about what a later open by name
// reaches: a directory swapped for a symlink in between sends the write wherever the link
// points, and openat2's RESOLVE_BENEATH alone stops only links that leave the workdir,
// not one to lev's home inside it (a jail's tree). So the open goes through descriptors:
// the workdir is opened and confirmed, each missing directory is made inside a directory
// descriptor that was checked first, the file's parent is opened and checked, and the
// file is opened relative to that descriptor by its last name alone, following no
// symlink. A check (checkDir, checkWritten) asks the kernel where the descriptor really
// is (/proc/self/fd), whether that is lev's state by path, and, walking up by device and
// inode, whether it lies under one of lev's directories and under the workdir at all.
func (f *FS) openWrite(tool string, a Access, rel string, rw int, create bool) (*os.File, error) {
	rootfd, err := unix.Open(f.Workdir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: workdir %s: %w", tool, f.Workdir, err)
	}
	defer unix.Close(rootfd)
	var root unix.Stat_t
	if err := unix.Fstat(rootfd, &root); err != nil {
		return nil, fmt.Errorf("%s: workdir %s: %w", tool, f.Workdir, err)
	}
	if real, err := fdRealFD(rootfd); err != nil || real != f.Workdir {
		return nil, f.writeOutside(tool, a, real, fmt.Sprintf("cannot be written: the workdir %s no longer resolves to itself (%s, %v)", f.Workdir, real, err))
	}
	dirfd, err := f.dirBeneath(tool, a, rootfd, &root, filepath.Dir(rel), create)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	base := filepath.Base(rel)
	how := func(flags int) *unix.OpenHow {
		h := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: beneath | unix.RESOLVE_NO_SYMLINKS}
		if flags&unix.O_CREAT != 0 {
			h.Mode = 0o644 // openat2 refuses a mode without O_CREAT
		}
		return h
	}
	// Look before opening: opening a device can act on it, and opening a FIFO to write
	// waits for a reader (forever, for a run). O_PATH opens nothing.
	if pfd, err := openat2(dirfd, base, how(unix.O_PATH)); err == nil {
		var st unix.Stat_t
		err = unix.Fstat(pfd, &st)
		unix.Close(pfd)
		if err != nil {
			return nil, f.mapWriteErr(tool, a, err)
		}
		if err := regularMode(st.Mode); err != nil {
			return nil, f.mapWriteErr(tool, a, err)
		}
	} else if !errors.Is(err, unix.ENOENT) {
		return nil, f.mapWriteErr(tool, a, escapeErr(err))
	}
	// No O_TRUNC: the file is cut only once its descriptor is checked. O_NONBLOCK: a
	// FIFO swapped in since the look fails (ENXIO) instead of waiting.
	flags := rw | unix.O_NONBLOCK | unix.O_NOCTTY
	fd, err := openat2(dirfd, base, how(flags))
	created := false
	if errors.Is(err, unix.ENOENT) && create {
		fd, err = openat2(dirfd, base, how(flags|unix.O_CREAT|unix.O_EXCL))
		created = err == nil
	}
	if err != nil {
		if errors.Is(err, unix.ENXIO) {
			return nil, notRegular(tool, a.Path, errNotRegular{"a named pipe or socket"})
		}
		return nil, f.mapWriteErr(tool, a, escapeErr(err))
	}
	file := os.NewFile(uintptr(fd), a.Real)
	if err := f.checkWritten(tool, a, file); err != nil {
		file.Close()
		if created {
			// Made by this call in a directory that moved after its check: take it back.
			unix.Unlinkat(dirfd, base, 0)
		}
		return nil, err
	}
	return file, nil
}

// dirBeneath opens dir (relative to the workdir) as a directory descriptor, making each
// missing component (when create is set) inside a descriptor that passed checkDir. The
// returned descriptor has passed checkDir.
func (f *FS) dirBeneath(tool string, a Access, rootfd int, root *unix.Stat_t, dir string, create bool) (int, error) {
	open := func(p string) (int, error) {
		return openat2(rootfd, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
	}
	cur, err := open(".")
	if err != nil {
		return -1, f.mapWriteErr(tool, a, escapeErr(err))
	}
	if dir != "." {
		parts := strings.Split(dir, "/")
		for i, c := range parts {
			sub := strings.Join(parts[:i+1], "/")
			next, err := open(sub)
			if errors.Is(err, unix.ENOENT) && create {
				// cur is where the directory is made: checked before anything is made in
				// it, so a swap cannot make even an empty directory in lev's home.
				if err := f.checkDir(tool, a, cur, root); err != nil {
					unix.Close(cur)
					return -1, err
				}
				if err := unix.Mkdirat(cur, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
					unix.Close(cur)
					return -1, f.mapWriteErr(tool, a, err)
				}
				next, err = open(sub)
			}
			unix.Close(cur)
			if err != nil {
				return -1, f.mapWriteErr(tool, a, escapeErr(err))
			}
			cur = next
		}
	}
	if err := f.checkDir(tool, a, cur, root); err != nil {
		unix.Close(cur)
		return -1, err
	}
	return cur, nil
}

// checkDir decides a directory descriptor a write acts in: where the kernel says it is
// must be in the workdir and not lev's state, and walking up from it by device and inode
// must meet the workdir before the filesystem root and no protected directory on the way.
func (f *FS) checkDir(tool string, a Access, fd int, root *unix.Stat_t) error {
	real, err := fdRealFD(fd)
	if err != nil {
		return f.writeOutside(tool, a, "", fmt.Sprintf("cannot be written: %v", err))
	}
	if !fspath.Within(f.Workdir, real) {
		return f.writeOutside(tool, a, real, fmt.Sprintf("is in %s, outside the workdir (a directory changed after the check)", real))
	}
	if err := f.protected(tool, a.Path, real, nil, false); err != nil {
		return err
	}
	dp, _ := f.Protect.(DirProtector)
	reachedRoot, err := walkUp(fd, func(st *unix.Stat_t) (bool, error) {
		if dp != nil {
			if what, hit := dp.CoversDir(uint64(st.Dev), uint64(st.Ino)); hit {
				return true, stateRefusal(tool, a.Path, real, what)
			}
		}
		return st.Dev == root.Dev && st.Ino == root.Ino, nil
	})
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return r
		}
		return f.writeOutside(tool, a, real, fmt.Sprintf("cannot be written: checking the directories above %s: %v", real, err))
	}
	if reachedRoot {
		return f.writeOutside(tool, a, real, fmt.Sprintf("is in %s, which is not beneath the workdir by device and inode", real))
	}
	return nil
}

// checkWritten decides the opened file itself: a regular file, in the workdir where the
// kernel says it is, not lev's by path or by inode (a hard link to one of its files).
func (f *FS) checkWritten(tool string, a Access, file *os.File) error {
	fi, err := file.Stat()
	if err != nil {
		return fmt.Errorf("%s: %s: %w", tool, a.Path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(file.Fd()), &st); err != nil {
		return fmt.Errorf("%s: %s: %w", tool, a.Path, err)
	}
	if err := regularMode(st.Mode); err != nil {
		return f.mapWriteErr(tool, a, err)
	}
	real, err := fdReal(file)
	if err != nil {
		return f.writeOutside(tool, a, "", fmt.Sprintf("cannot be written: %v", err))
	}
	if !fspath.Within(f.Workdir, real) || real == f.Workdir {
		return f.writeOutside(tool, a, real, fmt.Sprintf("opened as %s, outside the workdir", real))
	}
	return f.protected(tool, a.Path, real, fi, false)
}

// regularMode refuses anything but a regular file, by its stat mode.
func regularMode(mode uint32) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return nil
	case unix.S_IFIFO:
		return errNotRegular{"a named pipe (FIFO)"}
	case unix.S_IFSOCK:
		return errNotRegular{"a socket"}
	case unix.S_IFCHR, unix.S_IFBLK:
		return errNotRegular{"a device"}
	case unix.S_IFDIR:
		return errNotRegular{"a directory"}
	case unix.S_IFLNK:
		return errEscape
	}
	return errNotRegular{"not a regular file"}
}
