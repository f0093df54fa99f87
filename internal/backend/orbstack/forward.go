package orbstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/backend/forwardrec"
)

// The podman socket forward rides on OpenSSH and OrbStack's own SSH server. The OrbStack
// facts relied on, and where they are stated:
//
//   - OrbStack runs ONE SSH server for all machines, on the Mac, port 32222, accepting
//     connections from localhost only; it is not an sshd inside each machine (the
//     maintainer in orbstack/orbstack#780 and #31; docs.orbstack.dev/machines/ssh).
//   - OrbStack writes ~/.orbstack/ssh/config (a `Host orb` entry with that port and the key
//     ~/.orbstack/ssh/id_ed25519) and rewrites it on every start because paths and ports
//     can change (orbstack/orbstack#170, #538, #10). lever reads that file with -F and no
//     other config, so nothing in the user's ~/.ssh/config (ForwardAgent, RemoteForward,
//     ProxyCommand, a ControlMaster of their own) reaches the jail's connection.
//   - The user and machine are both in the login name: `ssh USER@MACHINE@orb` (ssh splits
//     the destination at the last '@'; docs.orbstack.dev/machines/ssh, and #1259 for
//     USER@MACHINE as the login name).
//   - Isolated machines keep "SSH and orb access from your Mac" and do not forward the SSH
//     agent (docs.orbstack.dev/machines/isolated).
//
// NOT documented by OrbStack, and not verified on a real Mac: that its SSH server accepts
// OpenSSH's unix-socket forwarding (direct-streamlocal@openssh.com). If it refuses, the
// `-O forward` below fails with ssh's message and `lever up` stops at the image step.
//
// Like Lima's (internal/backend/lima/forward.go), the forward lives in an ssh
// ControlMaster that lever starts once (`-f`, ControlPersist): it outlives the lever
// process, so the host socket keeps working for later lever commands, and `lever stop` /
// `lever destroy` end it with `-O exit`. The control socket and the forwarded socket are
// in the instance's state dir (0700); the forwarded socket is made 0600
// (StreamLocalBindMask=0177) and a stale one from a master that has gone is replaced
// (StreamLocalBindUnlink=yes).

// SSHConfigPath is OrbStack's generated ssh config for the user running lever.
func SSHConfigPath() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join("~", ".orbstack", "ssh", "config")
	}
	return filepath.Join(home, ".orbstack", "ssh", "config")
}

func (b *Backend) sshConfig() string {
	if b.o.SSHConfig != "" {
		return b.o.SSHConfig
	}
	return SSHConfigPath()
}

// ControlPath is the ssh master's control socket.
func (b *Backend) ControlPath() string { return filepath.Join(b.o.StateDir, "orb-ssh.ctl") }

func (b *Backend) forwardsFile() forwardrec.File {
	return forwardrec.File(filepath.Join(b.o.StateDir, "orb-forwards"))
}
func (b *Backend) sshLog() string { return filepath.Join(b.o.StateDir, "orb-ssh.log") }

// SSHDest is the login for the run user in this machine on OrbStack's server.
func (b *Backend) SSHDest() string { return b.o.RunUser + "@" + b.o.Machine + "@orb" }

// sshArgv is `ssh` with OrbStack's config only and the control path, then args, then
// the destination.
func (b *Backend) sshArgv(args ...string) []string {
	argv := []string{"-F", b.sshConfig(), "-o", "LogLevel=ERROR", "-o", "ControlPath=" + b.ControlPath()}
	argv = append(argv, args...)
	return append(argv, b.SSHDest())
}

// MasterArgv starts the control master in the background. Every option that shapes the
// forward is here, since the master creates the forwarded socket.
func (b *Backend) MasterArgv() []string {
	return b.sshArgv("-o", "ControlMaster=yes", "-o", "ControlPersist=yes",
		"-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindMask=0177", "-o", "StreamLocalBindUnlink=yes",
		"-o", "ForwardAgent=no", "-o", "ForwardX11=no", "-o", "BatchMode=yes",
		"-f", "-N")
}

// mux runs `ssh -O op` against lever's master: answered by the local master process.
func (b *Backend) mux(ctx context.Context, op string, args ...string) error {
	cmd := exec.CommandContext(ctx, b.o.SSH, b.sshArgv(append([]string{"-O", op}, args...)...)...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ssh -O %s %s: %w: %s", op, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startMaster starts the control master, writing its output to a log in the state dir:
// with -f the backgrounded ssh keeps its output descriptors, so a pipe would never close.
func (b *Backend) startMaster(ctx context.Context) error {
	if _, err := os.Stat(b.sshConfig()); err != nil {
		return fmt.Errorf("OrbStack's ssh config: %w (is OrbStack running?)", err)
	}
	// A control socket left by a master that has gone would make the new master give up
	// multiplexing and run without one.
	if err := os.Remove(b.ControlPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the stale ssh control socket: %w", err)
	}
	log, err := os.OpenFile(b.sshLog(), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("ssh log: %w", err)
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, b.o.SSH, b.MasterArgv()...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(b.sshLog())
		return fmt.Errorf("starting the ssh master to %s: %w: %s", b.SSHDest(), err, strings.TrimSpace(string(msg)))
	}
	return nil
}

// ForwardSocket implements bringup.SocketForwarder: hostPath becomes a unix socket whose
// connections reach guestPath in the machine (the run user's podman REST socket). It is
// idempotent: a running master is asked for the forward again, which it answers OK for a
// forward it already holds; a master that has gone is started afresh. hostPath must be in
// the instance's state dir.
func (b *Backend) ForwardSocket(ctx context.Context, guestPath, hostPath string) error {
	if !filepath.IsAbs(hostPath) || !filepath.IsAbs(guestPath) {
		return fmt.Errorf("orbstack: forward %s -> %s: both paths must be absolute", hostPath, guestPath)
	}
	if b.o.StateDir == "" || filepath.Dir(hostPath) != filepath.Clean(b.o.StateDir) {
		return fmt.Errorf("orbstack: forward %s: the host socket must be in the instance's state dir %s", hostPath, b.o.StateDir)
	}
	if strings.ContainsAny(hostPath+guestPath, ": \n") {
		return fmt.Errorf("orbstack: forward %s -> %s: a path with ':', space or newline cannot be expressed to ssh -L", hostPath, guestPath)
	}
	// ssh expands %-tokens and ${VAR} in ControlPath and in -L socket paths: a path
	// carrying either would name another file than the one lever checked.
	if p := hostPath + guestPath + b.ControlPath(); strings.ContainsAny(p, "%$") {
		return fmt.Errorf("orbstack: forward %s -> %s (control %s): a path with '%%' or '$' would be expanded by ssh", hostPath, guestPath, b.ControlPath())
	}
	if err := os.MkdirAll(b.o.StateDir, 0o700); err != nil {
		return fmt.Errorf("orbstack state dir: %w", err)
	}
	if b.mux(ctx, "check") != nil {
		if err := b.startMaster(ctx); err != nil {
			return err
		}
	}
	if err := b.mux(ctx, "forward", "-L", hostPath+":"+guestPath); err != nil {
		return err
	}
	return b.forwardsFile().Add(hostPath, guestPath)
}

// cancelForwards ends lever's master (best effort: one already gone has dropped its
// forwards) and removes the host sockets it made, its control socket and the record.
// Without a state dir (a backend built outside the CLI) there is nothing of lever's.
func (b *Backend) cancelForwards(ctx context.Context) error {
	if b.o.StateDir == "" {
		return nil
	}
	if _, err := os.Stat(b.ControlPath()); err == nil {
		_ = b.mux(ctx, "exit")
	}
	var errs []error
	for _, f := range b.forwardsFile().List() {
		if err := os.Remove(f[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	for _, p := range []string{b.ControlPath(), string(b.forwardsFile())} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
