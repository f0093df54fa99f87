//go:build darwin

package hostterm

import "golang.org/x/sys/unix"

// termiosRequest is the BSD (and macOS) "get termios" ioctl.
const termiosRequest = unix.TIOCGETA
