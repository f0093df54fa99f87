package daemon

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// Listen opens the daemon's listener: TCP for host:port, or a unix socket for
// unix:/abs/path.sock. The socket is mode 0600 from its creation (umask held around the
// bind, then checked): in a jail, a TCP port on loopback would be in reach of every process
// sharing the network namespace, while the socket is reached only by lev's own user
// through a directory the agent's tools do not see.
func Listen(addr string) (net.Listener, error) {
	sock, isUnix, err := SocketPath(addr)
	if err != nil {
		return nil, err
	}
	if !isUnix {
		return net.Listen("tcp", addr)
	}
	if st, err := os.Lstat(sock); err == nil {
		// A stale socket of a daemon that died is replaced; anything else at that path is
		// not ours to delete.
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("listen address %q: %s exists and is not a socket; refusing to replace it", addr, sock)
		}
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen address %q: another daemon answers on %s", addr, sock)
		}
		if err := os.Remove(sock); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", sock, err)
		}
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", sock, err)
	}
	st, err := os.Lstat(sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		ln.Close()
		return nil, fmt.Errorf("socket %s: not mode 0600 after chmod (%v)", sock, err)
	}
	return ln, nil
}
