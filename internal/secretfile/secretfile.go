// Package secretfile reads a file that only its owner may read: a private key, a bearer
// token. The file is opened once, by its own name (a symlink in its place is refused, not
// followed), the checks are made on the opened descriptor (a regular file, owned by the
// effective user, no group or other bits), and the contents are read from that same
// descriptor. Checking a name and then reading it again by name would let the file be
// swapped in between: the check would pass on one file and the read return another.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Max caps what is read: every secret file lever keeps is a few KiB at most.
const Max = 1 << 20

// Read returns the contents of the secret file at path after the checks.
func Read(path string) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readChecked(f, path)
}

// open opens path for reading without following a symlink in its last component and
// without blocking on a FIFO put in its place.
func open(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link; a private file is read only under its own name", path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readChecked checks the opened file f and reads it; path is only for the messages.
func readChecked(f *os.File, path string) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return nil, fmt.Errorf("%s is owned by uid %d, not by you (uid %d): a private file must be your own", path, st.Uid, euid)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o; a private file must be 0600 (run: chmod 600 %s)", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, Max+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > Max {
		return nil, fmt.Errorf("%s is larger than %d KiB; not a secret file lever wrote", path, Max>>10)
	}
	return data, nil
}
