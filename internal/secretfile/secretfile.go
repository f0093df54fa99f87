// Package secretfile reads a file that only its owner may read: a private key, a bearer
// token, the broker's API key (internal/keyfile adds its own checks on top). The file is
// opened once, the checks are made on the opened descriptor (a regular file, owned by the
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

// Max caps what Read reads: every secret file lever keeps is a few KiB at most.
const Max = 1 << 20

// Kind words the refusals for what a file holds, so a message says why it is refused.
type Kind struct {
	Noun string // what must be mode 0600: "a private file"
	Own  string // why another user's file is refused
}

// Private is the wording of Read's refusals.
var Private = Kind{Noun: "a private file", Own: "a private file must be your own"}

// Read returns the contents of the secret file at path after the checks, at most Max bytes.
// A symlink in the file's place is refused, not followed.
func Read(path string) ([]byte, error) {
	f, err := Open(path, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readChecked(f, path)
}

// readChecked checks the opened file f as Read does and reads it.
func readChecked(f *os.File, path string) ([]byte, error) {
	if _, err := Check(f, path, Private); err != nil {
		return nil, err
	}
	return ReadCapped(f, path, Max, "not a secret file lever wrote")
}

// Open opens path for reading without blocking on a FIFO put in its place. With follow
// false a symlink in the last component is refused; with it true the checks apply to the
// file the link lands on.
func Open(path string, follow bool) (*os.File, error) {
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Open(path, flags, 0)
	if !follow && errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link; a private file is read only under its own name", path)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Check makes the private-file checks on the opened f and returns what fstat said of it
// (for a caller's further checks); path is only for the messages.
func Check(f *os.File, path string, k Kind) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return nil, fmt.Errorf("%s is owned by uid %d, not by you (uid %d): %s", path, st.Uid, euid, k.Own)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o; %s must be mode 0600 (chmod 600 %s)", path, perm, k.Noun, path)
	}
	return &st, nil
}

// ReadCapped reads f to its end, refusing more than max bytes; why says what a bigger file
// is not.
func ReadCapped(f *os.File, path string, max int, why string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > max {
		return nil, fmt.Errorf("%s is larger than %d KiB; %s", path, max>>10, why)
	}
	return data, nil
}
