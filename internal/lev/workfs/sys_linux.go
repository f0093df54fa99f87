package workfs

import (
	"errors"
	"fmt"
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

// fdReal is the kernel's idea of where an open file lives. It fails (never answers "")
// when that cannot be told: /proc unreadable, or the file unlinked since it was opened.
func fdReal(f *os.File) (string, error) { return fdRealFD(int(f.Fd())) }

func fdRealFD(fd int) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("%w (/proc/self/fd: %v)", errFDUnknown, err)
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, " (deleted)") {
		return "", fmt.Errorf("%w (the kernel names it %q)", errFDUnknown, p)
	}
	return p, nil
}

// maxDepth bounds the walk up from a descriptor: deeper than any path the kernel resolves.
const maxDepth = 4096

// walkUp visits the directory open at fd and each directory above it, by "..", until
// visit says done or the filesystem root is reached (its ".." is itself). The walk goes
// through descriptors, so a rename or a symlink swapped in by name changes nothing.
func walkUp(fd int, visit func(st *unix.Stat_t) (done bool, err error)) (reachedRoot bool, err error) {
	cur, err := unix.Openat(fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer func() { unix.Close(cur) }()
	for range maxDepth {
		var st unix.Stat_t
		if err := unix.Fstat(cur, &st); err != nil {
			return false, err
		}
		if done, err := visit(&st); done || err != nil {
			return false, err
		}
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return false, err
		}
		var pst unix.Stat_t
		if err := unix.Fstat(up, &pst); err != nil {
			unix.Close(up)
			return false, err
		}
		if pst.Dev == st.Dev && pst.Ino == st.Ino {
			unix.Close(up)
			return true, nil
		}
		unix.Close(cur)
		cur = up
	}
	return false, errors.New("directory nesting deeper than any path")
}

// ancestorsClear refuses a directory descriptor that is, or lies under, one of lev's
// protected directories by device and inode (when the Protector knows them).
func (f *FS) ancestorsClear(tool, given string, file *os.File) error {
	return f.ancestorsClearFD(tool, given, int(file.Fd()))
}

// ancestorsClearFD is ancestorsClear on a raw descriptor the caller keeps owning.
func (f *FS) ancestorsClearFD(tool, given string, fd int) error {
	dp, ok := f.Protect.(DirProtector)
	if !ok {
		return nil
	}
	_, err := walkUp(fd, func(st *unix.Stat_t) (bool, error) {
		if what, hit := dp.CoversDir(uint64(st.Dev), uint64(st.Ino)); hit {
			return true, stateRefusal(tool, given, "", what)
		}
		return false, nil
	})
	return err
}

// fileAncestorsClear is ancestorsClear for a regular file's descriptor, which has no "..":
// the directory the kernel names as its parent is opened and must hold, under the file's
// name, this very file (same device and inode); then that directory is walked up.
func (f *FS) fileAncestorsClear(tool, given string, file *os.File, real string) error {
	if _, ok := f.Protect.(DirProtector); !ok {
		return nil
	}
	dfd, err := unix.Open(filepath.Dir(real), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", tool, given, err)
	}
	defer unix.Close(dfd)
	var in, st unix.Stat_t
	if err := unix.Fstatat(dfd, filepath.Base(real), &in, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &Refusal{Code: CodeOutside, Path: given, Msg: fmt.Sprintf("%s: refused: %s changed while it was opened", tool, given)}
	}
	if err := unix.Fstat(int(file.Fd()), &st); err != nil {
		return err
	}
	if in.Dev != st.Dev || in.Ino != st.Ino {
		return &Refusal{Code: CodeOutside, Path: given, Msg: fmt.Sprintf("%s: refused: %s changed while it was opened", tool, given)}
	}
	return f.ancestorsClearFD(tool, given, dfd)
}

const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

// openat2 is openat2(2), falling back to openat(2) on a kernel without it: the beneath
// resolution is then lost, but every descriptor is still checked after opening
// (checkDir, checkWritten), and that check is what decides.
func openat2(dirfd int, p string, how *unix.OpenHow) (int, error) {
	fd, err := unix.Openat2(dirfd, p, how)
	if errors.Is(err, unix.ENOSYS) {
		return unix.Openat(dirfd, p, int(how.Flags), uint32(how.Mode))
	}
	return fd, err
}

// escapeErr maps the kernel's "this resolution would leave the root" to errEscape.
func escapeErr(err error) error {
	if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
		return errEscape
	}
	return err
}
