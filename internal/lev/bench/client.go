package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/lev/strictjson"
)

// Env is the variable that names the socket in lev's container. Set, every shell command
// of every sandbox kind runs through the bench; there is no fallback to lev's container.
const Env = "LEV_BENCH_SOCKET"

// UnavailableError is a bench that is not there: no socket, or nothing answering it.
type UnavailableError struct {
	Socket string
	Err    error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("the workbench is not answering at %s (%v): shell commands run only in the workbench container, never in lev's; `lever up` recreates it", e.Socket, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Client talks to one bench socket.
type Client struct {
	Socket string
}

// Run sends req and waits for the response; cancelling ctx closes the connection, which
// makes the server kill the command. A refused request comes back as an error naming
// the key; a command that ran is a Response, whatever its exit code.
func (c Client) Run(ctx context.Context, req Request) (Response, error) {
	// The socket's directory is shared with the workbench, where an agent's command could
	// put a symlink in its place, aiming lev's client at a socket of lev's own.
	fi, err := os.Lstat(c.Socket)
	if err != nil {
		return Response{}, &UnavailableError{c.Socket, err}
	}
	if fi.Mode().Type() != os.ModeSocket {
		return Response{}, &UnavailableError{c.Socket, fmt.Errorf("it is a %v, not a socket", fi.Mode().Type())}
	}
	line, err := json.Marshal(req)
	if err != nil {
		return Response{}, fmt.Errorf("bench request: %w", err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return Response{}, &UnavailableError{c.Socket, err}
		}
		return Response{}, fmt.Errorf("bench %s: %w", c.Socket, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetWriteDeadline(time.Now().Add(RequestTimeout))
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return Response{}, c.ctxErr(ctx, fmt.Errorf("bench %s: sending the request: %w", c.Socket, err))
	}
	conn.SetWriteDeadline(time.Time{})
	// The server kills at the deadline; past it plus a margin, the answer is not coming.
	conn.SetReadDeadline(time.Now().Add(req.Deadline() + 30*time.Second))
	raw, err := readLine(bufio.NewReaderSize(conn, 64<<10), MaxResponse)
	if err != nil {
		return Response{}, c.ctxErr(ctx, fmt.Errorf("bench %s: reading the response: %w", c.Socket, err))
	}
	// The workbench is where the agent's commands run: its answer is decoded as strictly
	// as anything else an agent controls.
	var resp Response
	if err := strictjson.Decode(raw, &resp); err != nil {
		return Response{}, fmt.Errorf("bench %s: bad response: %w", c.Socket, err)
	}
	if resp.Error != "" && !resp.Started {
		return resp, fmt.Errorf("bench %s: %s", c.Socket, resp.Error)
	}
	if len(resp.Stdout) > req.StdoutMax || len(resp.Stderr) > req.StderrMax {
		return Response{}, fmt.Errorf("bench %s: bad response: more output than the request's caps", c.Socket)
	}
	return resp, nil
}

// Stream runs req (Stream set) with stdin and stdout on the connection: it returns once
// the command started (or was refused: the error names the key), and then copies stdin to
// the command (closing its side at stdin's EOF) and the command's stdout to stdout until
// the command exits or ctx ends; done is closed then, with the copy's error in *err.
func (c Client) Stream(ctx context.Context, req Request, stdin io.Reader, stdout io.Writer) (done <-chan error, err error) {
	req.Stream = true
	fi, err := os.Lstat(c.Socket)
	if err != nil {
		return nil, &UnavailableError{c.Socket, err}
	}
	if fi.Mode().Type() != os.ModeSocket {
		return nil, &UnavailableError{c.Socket, fmt.Errorf("it is a %v, not a socket", fi.Mode().Type())}
	}
	line, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("bench request: %w", err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, &UnavailableError{c.Socket, err}
		}
		return nil, fmt.Errorf("bench %s: %w", c.Socket, err)
	}
	conn.SetDeadline(time.Now().Add(RequestTimeout))
	if _, err := conn.Write(append(line, '\n')); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench %s: sending the request: %w", c.Socket, err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	raw, err := readLine(br, MaxResponse)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench %s: reading the answer: %w", c.Socket, err)
	}
	conn.SetDeadline(time.Time{})
	var resp Response
	if err := strictjson.Decode(raw, &resp); err != nil {
		conn.Close()
		return nil, fmt.Errorf("bench %s: bad answer: %w", c.Socket, err)
	}
	if !resp.Started {
		conn.Close()
		return nil, fmt.Errorf("bench %s: %s", c.Socket, resp.Error)
	}
	ch := make(chan error, 1)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	go func() {
		io.Copy(conn, stdin)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	go func() {
		_, err := io.Copy(stdout, br)
		stop()
		conn.Close()
		ch <- err
	}()
	return ch, nil
}

func (c Client) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}
