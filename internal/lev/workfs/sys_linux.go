package workfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// openNoBlock opens a resolved path for reading. O_NONBLOCK: opening a FIFO never waits
// for a writer. A symlink swapped in is followed; the caller checks the descriptor.
func openNoBlock(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// fdPath is the kernel's idea of where an open descriptor lives.
func fdPath(f *os.File) (string, bool) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil || !strings.HasPrefix(p, "/") || strings.HasSuffix(p, " (deleted)") {
		return "", false
	}
	return p, true
}

const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// writeBeneath writes rel under root with openat2(RESOLVE_BENEATH): a symlink or ".." that
// would leave root fails in the kernel, whatever raced in after ResolveWrite.
func writeBeneath(root, rel string, data []byte) error {
	rootfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rootfd)
	dir := filepath.Dir(rel)
	if dir != "." {
		if err := mkdirBeneath(rootfd, dir); err != nil {
			return err
		}
	}
	// Look before opening: opening a device can act on it, and opening a FIFO to write
	// waits for a reader (forever, for a run). O_PATH opens nothing.
	if pfd, err := unix.Openat2(rootfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath}); err == nil {
		var st unix.Stat_t
		err = unix.Fstat(pfd, &st)
		unix.Close(pfd)
		if err != nil {
			return err
		}
		if err := regularMode(st.Mode); err != nil {
			return err
		}
	} else if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
		return errEscape
	} else if errors.Is(err, unix.ENOSYS) {
		return writeFallback(filepath.Join(root, rel), data)
	}
	// No O_TRUNC: truncate only once the descriptor is known to be a regular file.
	// O_NONBLOCK: a FIFO swapped in since the look fails (ENXIO) instead of waiting.
	fd, err := unix.Openat2(rootfd, rel, &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY,
		Mode:    0o644,
		Resolve: beneath,
	})
	if err != nil {
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
			return errEscape
		}
		if errors.Is(err, unix.ENXIO) {
			return errNotRegular{"a named pipe or socket"}
		}
		if errors.Is(err, unix.ENOSYS) {
			return writeFallback(filepath.Join(root, rel), data)
		}
		return err
	}
	return replaceContents(fd, rel, data)
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

func mkdirBeneath(rootfd int, dir string) error {
	parts := strings.Split(dir, "/")
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		fd, err := unix.Openat2(rootfd, sub, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
		if err == nil {
			unix.Close(fd)
			continue
		}
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
			return errEscape
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		parent := "."
		if i > 0 {
			parent = strings.Join(parts[:i], "/")
		}
		pfd, err := unix.Openat2(rootfd, parent, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
				return errEscape
			}
			return err
		}
		err = unix.Mkdirat(pfd, parts[i], 0o755)
		unix.Close(pfd)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
	}
	return nil
}

// writeFallback is for kernels without openat2: the same look-then-open rules, without
// the kernel's beneath check.
func writeFallback(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if st, err := os.Lstat(p); err == nil {
		if err := fileModeRegular(st.Mode()); err != nil {
			return err
		}
	}
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0o644)
	if err != nil {
		if errors.Is(err, unix.ENXIO) {
			return errNotRegular{"a named pipe or socket"}
		}
		return err
	}
	return replaceContents(fd, p, data)
}

// replaceContents writes data over the file open at fd (opened for writing without
// O_TRUNC): only once fstat shows a regular file is it truncated, so a FIFO, device or
// socket swapped in after the path checks is refused before anything is written.
func replaceContents(fd int, name string, data []byte) error {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if err := regularMode(st.Mode); err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Close()
}
