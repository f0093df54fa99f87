//go:build linux

package hostterm

import "golang.org/x/sys/unix"

// termiosRequest is Linux's "get termios" ioctl.
const termiosRequest = unix.TCGETS
