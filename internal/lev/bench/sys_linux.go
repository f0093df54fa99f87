package bench

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"
)

// sysProcAttr puts the command in a process group of its own (killed whole) and, when
// isolate, in a new user namespace (mapping only the server's own uid and gid, so it gains
// nothing) holding a new PID namespace: the command is its PID 1, so when it exits or is
// killed the kernel kills everything it started, setsid or not. Nothing a command starts
// outlives it (a listener at the bench's socket, say, waiting for a later network=false
// command). With the network off, the user namespace also holds a new network namespace:
// only a loopback of its own.
func sysProcAttr(network, isolate bool) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if !isolate {
		return a
	}
	uid, gid := os.Getuid(), os.Getgid()
	a.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
	if !network {
		a.Cloneflags |= syscall.CLONE_NEWNET
	}
	a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	a.GidMappingsEnableSetgroups = false
	return a
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
