package lima

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/backend/forwardrec"
)

// RunUser is the guest's run user: the default user limactl creates in the VM, named
// after the host user who owns it (Lima's own rule; the template does not override it).
func (l *Lima) RunUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return os.Getenv("USER")
}

// forwardsFile lists, one "host guest" pair a line, the socket forwards lever asked the
// ControlMaster for, so a later `lever stop`/`destroy` (another process) can cancel them.
func (l *Lima) forwardsFile() forwardrec.File {
	return forwardrec.File(filepath.Join(l.stateDir(), "forwards"))
}

// sshMux runs `ssh -O <op>` against the ControlMaster Lima's host agent keeps for the VM.
// A mux command is answered by the local master process: it is no guest round-trip.
func (l *Lima) sshMux(ctx context.Context, op string, args ...string) error {
	argv := append([]string{"-F", filepath.Join(l.home, l.vm, "ssh.config"), "-o", "LogLevel=ERROR", "-O", op}, args...)
	argv = append(argv, "lima-"+l.vm)
	cmd := exec.CommandContext(ctx, "ssh", argv...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ssh -O %s %s: %w: %s", op, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ForwardSocket makes hostPath a unix socket whose connections reach guestPath in the VM
// (the run user's podman REST socket), through `ssh -O forward -L host:guest` on Lima's
// ControlMaster. The master keeps the forward for as long as it lives; asking again for a
// forward it already holds is answered OK by the master. A socket file left by a master
// that has since gone (the VM was restarted) refuses connections: it is removed and the
// forward asked for once more. hostPath must be under the instance's state dir.
func (l *Lima) ForwardSocket(ctx context.Context, guestPath, hostPath string) error {
	if !filepath.IsAbs(hostPath) || !filepath.IsAbs(guestPath) {
		return fmt.Errorf("lima: forward %s -> %s: both paths must be absolute", hostPath, guestPath)
	}
	spec := []string{"-L", hostPath + ":" + guestPath}
	err := l.sshMux(ctx, "forward", spec...)
	if err != nil {
		if _, serr := os.Lstat(hostPath); serr != nil || socketAnswers(hostPath) {
			return err
		}
		if rerr := os.Remove(hostPath); rerr != nil {
			return fmt.Errorf("%w (removing the stale socket: %v)", err, rerr)
		}
		if err = l.sshMux(ctx, "forward", spec...); err != nil {
			return err
		}
	}
	return l.forwardsFile().Add(hostPath, guestPath)
}

func socketAnswers(path string) bool {
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// cancelForwards asks the master to drop every recorded forward (best effort: a master
// already gone has dropped them) and removes their host socket files and the record.
func (l *Lima) cancelForwards(ctx context.Context) error {
	var errs []error
	for _, f := range l.forwardsFile().List() {
		_ = l.sshMux(ctx, "cancel", "-L", f[0]+":"+f[1])
		if err := os.Remove(f[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(string(l.forwardsFile())); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
