package bench

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"
)

// sysProcAttr puts the command in a process group of its own (killed whole) and, when
// isolate, in a new user namespace (one id each: uid and gid inside, mapped to the
// server's own, so it gains nothing) holding a new PID namespace, where the command is
// PID 1: when it ends, the kernel kills everything it started, setsid or not (a listener
// at the bench's socket, say, waiting for a later network=false command); a new mount
// namespace, where the mounts it inherits (the tmpfs over the socket's directory, Hide)
// are locked: it cannot unmount them; and, with the network off, a new network
// namespace: only a loopback of its own.
func sysProcAttr(network, isolate bool, uid, gid int) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if !isolate {
		return a
	}
	a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
	if !network {
		a.Cloneflags |= syscall.CLONE_NEWNET
	}
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: os.Getuid(), Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: os.Getgid(), Size: 1}}
	a.GidMappingsEnableSetgroups = false
	return a
}

// ShellAttr starts a `lever shell` session's command as the workbench's commands run: a new
// user namespace (uid and gid inside, mapped to the caller's, gaining nothing), PID
// namespace (the server's processes are not its to signal) and mount namespace, where the
// tmpfs over the channel's directory (Hide, made by the caller) is locked. Unlike a
// command's, it stays in the caller's process group: the session's terminal keeps it in
// the foreground.
func ShellAttr(uid, gid int) *syscall.SysProcAttr {
	a := sysProcAttr(true, true, uid, gid)
	a.Setpgid = false
	return a
}

// InnerAttr starts the serving process of `lev bench serve` as root of a user namespace
// of its own (mapped to the caller's uid and gid) with a mount namespace of its own, where
// Hide can cover the socket's directory.
func InnerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL,
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false}
}

// Hide puts an empty read-only tmpfs over dir (the socket's directory) in the calling
// process's mount namespace, after making its mounts private. The listening socket stays
// open; its path is out of reach of everything started from here: the commands get the
// tmpfs locked into their own mount namespaces, and /proc/<pid>/root of this process
// shows this view.
func Hide(dir string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, "size=4k,mode=0555"); err != nil {
		return fmt.Errorf("hiding %s: %w", dir, err)
	}
	return nil
}

// OuterIDs reads the uid and gid that root of the caller's user namespace is outside
// (InnerAttr's maps): the ids commands get.
func OuterIDs() (uid, gid int, err error) {
	read := func(p string) (int, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, err
		}
		var in, out, n int
		if _, err := fmt.Sscan(string(b), &in, &out, &n); err != nil || in != 0 || n != 1 {
			return 0, fmt.Errorf("%s: want one line mapping 0, got %q", p, b)
		}
		return out, nil
	}
	if uid, err = read("/proc/self/uid_map"); err != nil {
		return 0, 0, err
	}
	gid, err = read("/proc/self/gid_map")
	return uid, gid, err
}

// SetNotDumpable makes the calling process non-dumpable: its /proc files (root, cwd, fd,
// environ, mem) are out of reach of processes of the same uid without privilege.
func SetNotDumpable() {
	const prSetDumpable = 4
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0)
}

// SetSubreaper makes orphans of the server's commands its children (PR_SET_CHILD_SUBREAPER),
// so Reap collects them even when the server is not PID 1.
func SetSubreaper() error {
	const prSetChildSubreaper = 36
	_, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if e != 0 {
		return e
	}
	return nil
}

// reaper collects exited children the server did not start itself (orphans of killed
// commands). It peeks with waitid(WNOWAIT) and reaps only a pid that is not one of the
// server's own, which os/exec waits for; s.mu keeps a Start and its registration atomic.
func (s *Server) reaper(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s.reapOrphans()
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-tick.C:
		}
	}
}

func (s *Server) reapOrphans() {
	const (
		pAll    = 0
		wNoWait = 0x1000000
	)
	for {
		s.mu.Lock()
		var info [128]byte // siginfo_t; si_pid is at offset 16 on Linux
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info[0])),
			syscall.WEXITED|syscall.WNOHANG|wNoWait, 0, 0)
		pid := int(*(*int32)(unsafe.Pointer(&info[16])))
		if e != 0 || pid <= 0 || s.ours[pid] {
			s.mu.Unlock()
			return
		}
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		s.mu.Unlock()
	}
}
