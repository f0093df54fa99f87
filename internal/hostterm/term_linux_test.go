package hostterm

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a real pseudo-terminal pair (Linux's /dev/ptmx): the positive control that
// the termios query this package relies on answers for an actual terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open slave: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

func TestIsTerminal(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	reg, err := os.Create(t.TempDir() + "/log")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	_, slave := openPTY(t)
	var nilFile *os.File

	for _, tc := range []struct {
		name string
		w    io.Writer
		want bool
	}{
		{"pty slave (positive control)", slave, true},
		{"buffer", &bytes.Buffer{}, false},
		{"discard", io.Discard, false},
		{"nil *os.File", nilFile, false},
		{"pipe", pw, false},
		// A character device that is not a tty: the check must ask termios, not the mode.
		{"/dev/null", devnull, false},
		{"regular file", reg, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsTerminal(tc.w); got != tc.want {
				t.Fatalf("IsTerminal(%s) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}
