package workfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

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
	fd, err := unix.Openat2(rootfd, rel, &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Mode:    0o644,
		Resolve: beneath,
	})
	if err != nil {
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
			return errEscape
		}
		if errors.Is(err, unix.ENOSYS) {
			return writeFallback(filepath.Join(root, rel), data)
		}
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Close()
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

func writeFallback(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}
