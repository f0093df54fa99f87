// Package hostterm is what lever and lev need to know about a person's terminal: whether a
// writer is one, and how text from the agent's side is made safe to print on one
// (escape.go: every control character made visible). The ioctl that asks differs per
// kernel (TCGETS on Linux, TIOCGETA on the BSDs and macOS), so the request number sits
// behind a build-tagged file pair and everything else lives here, where the Linux tests
// exercise it. It must not write to a terminal itself or change its modes (raw mode for a
// terminal session belongs to the command that needs it).
package hostterm

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether w is a terminal: an *os.File whose descriptor answers the
// termios query. A character device that is not a tty (/dev/null) does not, so progress
// redraws never land in a log file or a pipe.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	return fdIsTerminal(int(f.Fd()))
}

// fdIsTerminal is the seam's consumer: the per-platform request number is all that varies.
func fdIsTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, termiosRequest)
	return err == nil
}
