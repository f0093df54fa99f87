package containers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	dockerContainer "github.com/docker/docker/api/types/container"
	"golang.org/x/term"

	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings"
	podcontainers "github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/version"
)

// ExecOptions is one command run in a running container through the podman exec API.
type ExecOptions struct {
	Argv    []string
	Env     []string // KEY=VALUE, added to the container's environment
	WorkDir string   // "" keeps the container's
	// TTY gives the command a pseudo-terminal. When Stdin is a terminal *os.File, that
	// terminal is put in raw mode for the session (restored after) and the session's
	// window follows it (SIGWINCH).
	TTY bool
	// Stdin, when set, is forwarded to the command; its EOF closes the command's stdin.
	// Nil: the command's stdin is empty.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output (with TTY, both arrive on Stdout, as
	// a terminal merges them). Nil discards.
	Stdout, Stderr io.Writer
}

// Exec runs o.Argv in the running container name and returns its exit code. err is set
// only when the command could not be run or its output not delivered; a command that
// runs and fails is (code, nil). Everything goes over the podman REST socket the Client
// already uses: exec create, then a hijacked exec start carrying the streams.
func (c *Client) Exec(ctx context.Context, name string, o ExecOptions) (int, error) {
	if len(o.Argv) == 0 {
		return 0, errors.New("exec: empty command")
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	cfg := &handlers.ExecCreateConfig{ExecOptions: dockerContainer.ExecOptions{
		Cmd: o.Argv, Env: o.Env, WorkingDir: o.WorkDir, Tty: o.TTY,
		AttachStdin: o.Stdin != nil, AttachStdout: true, AttachStderr: true,
	}}
	id, err := podcontainers.ExecCreate(c.ctx, name, cfg)
	if err != nil {
		return 0, fmt.Errorf("exec in container %s: %w", name, err)
	}
	// Podman keeps an exec session's record until it is removed; the API has no
	// auto-remove, so lever removes its own (best effort: the 4.x service keeps
	// finished sessions a few minutes and drops them itself).
	defer podcontainers.ExecRemove(c.ctx, id, new(podcontainers.ExecRemoveOptions).WithForce(true))

	termIn, _ := o.Stdin.(*os.File)
	if termIn != nil && (!o.TTY || !term.IsTerminal(int(termIn.Fd()))) {
		termIn = nil
	}
	var w, h uint16
	if termIn != nil {
		if cw, ch, err := term.GetSize(int(termIn.Fd())); err == nil {
			w, h = uint16(cw), uint16(ch)
		}
	}
	conn, br, err := c.execStart(ctx, id, o.TTY, w, h)
	if err != nil {
		return 0, fmt.Errorf("starting exec in container %s: %w", name, err)
	}
	defer conn.Close()
	// A cancelled ctx ends the session from our side: closing the stream makes podman
	// see the attach end; the command itself is killed with the container's exec cleanup.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	if termIn != nil {
		// Raw mode: keystrokes (^C included) go to the command, as with docker exec -it.
		state, err := term.MakeRaw(int(termIn.Fd()))
		if err != nil {
			return 0, fmt.Errorf("setting the terminal to raw mode: %w", err)
		}
		defer term.Restore(int(termIn.Fd()), state)
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case <-done:
					return
				case <-winch:
					if cw, ch, err := term.GetSize(int(termIn.Fd())); err == nil {
						_ = podcontainers.ResizeExecTTY(c.ctx, id, new(podcontainers.ResizeExecTTYOptions).WithWidth(cw).WithHeight(ch))
					}
				}
			}
		}()
	}

	if o.Stdin != nil {
		go func() {
			_, err := io.Copy(conn, o.Stdin)
			if err == nil {
				// EOF on our side is EOF on the command's stdin.
				if cw, ok := conn.(interface{ CloseWrite() error }); ok {
					cw.CloseWrite()
				}
			}
		}()
	}

	var copyErr error
	if o.TTY {
		_, copyErr = io.Copy(o.Stdout, br)
	} else {
		copyErr = demux(br, o.Stdout, o.Stderr)
	}
	if ctx.Err() != nil {
		return 0, fmt.Errorf("exec in container %s: %w", name, ctx.Err())
	}
	if copyErr != nil && !errors.Is(copyErr, net.ErrClosed) {
		return 0, fmt.Errorf("reading exec output from container %s: %w", name, copyErr)
	}
	return c.execExitCode(ctx, id, name)
}

// execExitCode waits for podman to record the session's end: the stream can close a
// moment before the exit code is stored.
func (c *Client) execExitCode(ctx context.Context, id, name string) (int, error) {
	for i := 0; ; i++ {
		ins, err := podcontainers.ExecInspect(c.ctx, id, nil)
		if err != nil {
			return 0, fmt.Errorf("reading the exit code of exec in container %s: %w", name, err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if i == 100 {
			return 0, fmt.Errorf("exec in container %s: output ended but the command is still running after 5s", name)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// execStart starts session id over its own connection and hijacks it. The bindings'
// ExecStartAndAttach cannot be used: it takes the terminal from os.Stdin whatever the
// caller passes and swaps the shared connection's transport while it runs.
func (c *Client) execStart(ctx context.Context, id string, tty bool, w, h uint16) (net.Conn, *bufio.Reader, error) {
	bc, err := bindings.GetClient(c.ctx)
	if err != nil {
		return nil, nil, err
	}
	tr, ok := bc.Client.Transport.(*http.Transport)
	if !ok || tr.DialContext == nil {
		return nil, nil, errors.New("podman connection has no dialer to hijack")
	}
	// The bindings' dialer ignores the address: it always reaches the service socket.
	conn, err := tr.DialContext(ctx, "unix", "d")
	if err != nil {
		return nil, nil, fmt.Errorf("dialing the podman service: %w", err)
	}
	body, _ := json.Marshal(handlers.ExecStartConfig{Tty: tty, Width: w, Height: h})
	v := version.APIVersion[version.Libpod][version.CurrentAPI]
	url := fmt.Sprintf("http://d/v%d.%d.%d/libpod/exec/%s/start", v.Major, v.Minor, v.Patch, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("sending exec start: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("reading exec start response: %w", err)
	}
	// 101 when the service upgrades; some versions answer 200 and stream raw anyway.
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		conn.Close()
		return nil, nil, fmt.Errorf("exec start: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return conn, br, nil
}

// demux splits podman's multiplexed non-TTY stream: frames of an 8-byte header (stream
// id, 3 zero bytes, big-endian length) and a payload.
func demux(r io.Reader, stdout, stderr io.Writer) error {
	var hdr [8]byte
	buf := make([]byte, 32*1024)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		var dst io.Writer
		switch hdr[0] {
		case 0, 1:
			dst = stdout
		case 2:
			dst = stderr
		case 3:
			msg := make([]byte, min(n, 4096))
			io.ReadFull(r, msg)
			return fmt.Errorf("podman: %s", msg)
		default:
			return fmt.Errorf("unknown stream %d in exec output", hdr[0])
		}
		for n > 0 {
			k, err := r.Read(buf[:min(n, len(buf))])
			if k > 0 {
				_, werr := dst.Write(buf[:k])
				if werr != nil {
					return werr
				}
				n -= k
			}
			if err != nil {
				return err
			}
		}
	}
}
