//go:build !linux

package bench

import (
	"context"
	"errors"
	"syscall"
)

// errNotLinux: the workbench is a Linux container, and the channel's isolation (user, PID,
// mount and network namespaces, PR_SET_CHILD_SUBREAPER) exists only there. lev builds for
// other systems (lev's CLI talks to a daemon from anywhere); serving the bench does not.
var errNotLinux = errors.New("lev bench serve runs only on Linux (the workbench is a Linux container)")

// sysProcAttr refuses isolation it cannot give: a command is only ever run by a server
// that started, and on this system Serve's setup (Hide, OuterIDs) has already refused.
func sysProcAttr(network, isolate bool, uid, gid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// ShellAttr has nothing to ask for here; Hide refuses first.
func ShellAttr(uid, gid int) *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// InnerAttr has nothing to ask for here; Hide refuses first.
func InnerAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// Hide refuses: there is no mount namespace to hide the socket's directory in.
func Hide(dir string) error { return errNotLinux }

// OuterIDs refuses: there are no user-namespace maps to read.
func OuterIDs() (uid, gid int, err error) { return 0, 0, errNotLinux }

// SetNotDumpable does nothing here.
func SetNotDumpable() {}

// SetSubreaper refuses: orphans could not be collected.
func SetSubreaper() error { return errNotLinux }

func (s *Server) reaper(ctx context.Context) { <-ctx.Done() }
