// Package beneath is how lever on the host reads and writes inside a directory that
// somebody else writes too (the tree the agents write): it opens beneath the directory it
// was given and follows no symlink on the way (openat2 with RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS on Linux, a walk of O_NOFOLLOW opens one name at a time elsewhere),
// so a link an agent planted can neither send a read to another file nor a write out of
// the directory, and a swap between a check and the open changes nothing (there is no
// separate check). Every read is bounded and takes only a regular file, opened without
// blocking: a huge file, a sparse one, a FIFO or a device is refused with an error
// naming the file and the cap, before anything is allocated for it.
package beneath

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is an open directory that names are resolved beneath.
type Dir struct {
	fd   int
	path string // for errors
}

// Open opens dir (following it: the caller named it) for work beneath it.
func Open(dir string) (*Dir, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &Dir{fd: fd, path: dir}, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Path is the directory as it was opened.
func (d *Dir) Path() string { return d.path }

// name is rel's full path, for errors.
func (d *Dir) name(rel string) string { return filepath.Join(d.path, filepath.FromSlash(rel)) }

// clean checks rel: relative, slash-separated, no "..": a name beneath the directory.
func clean(rel string) (string, error) {
	rel = filepath.ToSlash(rel)
	c := path.Clean(rel)
	switch {
	case rel == "", path.IsAbs(rel):
		return "", fmt.Errorf("%q is not a path relative to the directory", rel)
	case c == "..", strings.HasPrefix(c, "../"):
		return "", fmt.Errorf("%q leads out of the directory", rel)
	}
	return c, nil
}

// ErrSymlink is a name whose path holds a symlink: nothing beneath a Dir is reached
// through one.
var ErrSymlink = errors.New("a symlink is on the path (lever follows none there)")

// explain turns the resolver's refusals into ErrSymlink for the file's name.
func (d *Dir) explain(op, rel string, err error) error {
	if c, cerr := clean(rel); cerr == nil && errors.Is(err, unix.ENOTDIR) && d.linkOnPath(c) {
		err = ErrSymlink
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EMLINK) {
		err = ErrSymlink
	}
	return &os.PathError{Op: op, Path: d.name(rel), Err: err}
}

// open opens rel beneath d with flags (O_NOFOLLOW and O_CLOEXEC are added).
func (d *Dir) open(rel string, flags int, perm uint32) (int, error) {
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if rel == "." {
		return unix.Openat(d.fd, ".", flags, perm)
	}
	if fd, err := openat2(d.fd, rel, flags, perm); !errors.Is(err, unix.ENOSYS) {
		return fd, err
	}
	parent, base, err := d.walk(rel)
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	return unix.Openat(parent, base, flags, perm)
}

// walk opens rel's parent one name at a time, never following a symlink, and returns
// it with rel's last name. The caller closes the descriptor.
func (d *Dir) walk(rel string) (int, string, error) {
	names := strings.Split(rel, "/")
	fd, err := unix.Dup(d.fd)
	if err != nil {
		return -1, "", err
	}
	for _, n := range names[:len(names)-1] {
		next, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, "", err
		}
		fd = next
	}
	return fd, names[len(names)-1], nil
}

// linkOnPath says whether a name on rel's path is a symlink: an O_DIRECTORY|O_NOFOLLOW
// open of one fails with ENOTDIR rather than ELOOP, and the error should say why.
func (d *Dir) linkOnPath(rel string) bool {
	fd, err := unix.Dup(d.fd)
	if err != nil {
		return false
	}
	for _, n := range strings.Split(rel, "/") {
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
		}
		next, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return false
		}
		fd = next
	}
	unix.Close(fd)
	return false
}

// parent opens rel's parent directory beneath d, for an *at call on rel's last name.
func (d *Dir) parent(rel string) (int, string, error) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	fd, err := d.open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	return fd, base, err
}

// Kind is what a name beneath d is, not following a symlink: fs.ModeType bits (0 for a
// regular file), or an error (fs.ErrNotExist when it is not there).
func (d *Dir) Kind(rel string) (os.FileMode, error) {
	c, err := clean(rel)
	if err != nil {
		return 0, err
	}
	fd, base, err := d.parent(c)
	if err != nil {
		return 0, d.explain("lstat", rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, &os.PathError{Op: "lstat", Path: d.name(rel), Err: err}
	}
	return modeOf(uint32(st.Mode)), nil
}

func modeOf(m uint32) os.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFDIR:
		return os.ModeDir
	case unix.S_IFLNK:
		return os.ModeSymlink
	case unix.S_IFIFO:
		return os.ModeNamedPipe
	case unix.S_IFSOCK:
		return os.ModeSocket
	case unix.S_IFCHR:
		return os.ModeDevice | os.ModeCharDevice
	}
	return os.ModeDevice
}

// ReadFile reads rel beneath d: a regular file of at most max bytes.
func (d *Dir) ReadFile(rel string, max int64) ([]byte, error) {
	c, err := clean(rel)
	if err != nil {
		return nil, err
	}
	fd, err := d.open(c, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, d.explain("open", rel, err)
	}
	return readFD(fd, d.name(rel), max)
}

// ReadFile reads the file at p (following p as given: the caller named it): a regular
// file of at most max bytes, opened without blocking, so a FIFO or a device is refused
// rather than waited on or read forever.
func ReadFile(p string, max int64) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return readFD(fd, p, max)
}

// TooBig is a file over its cap.
type TooBig struct {
	Path      string
	Size, Max int64
}

func (e *TooBig) Error() string {
	return fmt.Sprintf("%s is %d bytes, more than the %d lever reads from it", e.Path, e.Size, e.Max)
}

// readFD reads the regular file fd names, at most max bytes, and closes it. The size is
// checked before a byte is allocated, and the read stops at max+1 whatever the size said
// (the file may grow).
func readFD(fd int, name string, max int64) ([]byte, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s): lever reads only regular files there", name, kindName(st.Mode()))
	}
	if st.Size() > max {
		return nil, &TooBig{Path: name, Size: st.Size(), Max: max}
	}
	// Blocking again for the read itself: a regular file never waits.
	if err := unix.SetNonblock(fd, false); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if int64(len(b)) > max {
		return nil, &TooBig{Path: name, Size: int64(len(b)), Max: max}
	}
	return b, nil
}

func kindName(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSymlink != 0:
		return "a symlink"
	}
	return m.Type().String()
}
