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

// dial checks the socket, reads this start's key and connects; the request line carries
// a fresh nonce.
func (c Client) dial(ctx context.Context, req Request) (net.Conn, []byte, []byte, error) {
	// The socket's directory is shared with the workbench, where an agent's command could
	// put a symlink in its place, aiming lev's client at a socket of lev's own.
	fi, err := os.Lstat(c.Socket)
	if err != nil {
		return nil, nil, nil, &UnavailableError{c.Socket, err}
	}
	if fi.Mode().Type() != os.ModeSocket {
		return nil, nil, nil, &UnavailableError{c.Socket, fmt.Errorf("it is a %v, not a socket", fi.Mode().Type())}
	}
	key, err := ReadKey(c.Socket)
	if err != nil {
		return nil, nil, nil, &UnavailableError{c.Socket, err}
	}
	if req.Nonce, err = nonce(); err != nil {
		return nil, nil, nil, err
	}
	line, err := json.Marshal(req)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("bench request: %w", err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, nil, nil, &UnavailableError{c.Socket, err}
		}
		return nil, nil, nil, fmt.Errorf("bench %s: %w", c.Socket, err)
	}
	return conn, key, line, nil
}

// Run sends req and waits for the response; cancelling ctx closes the connection, which
// makes the server kill the command. A refused request comes back as an error naming
// the key; a command that ran is a Response, whatever its exit code. An answer that does
// not prove itself under this start's key is refused (NotTheBenchError).
func (c Client) Run(ctx context.Context, req Request) (Response, error) {
	conn, key, line, err := c.dial(ctx, req)
	if err != nil {
		return Response{}, err
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
	if err := verify(c.Socket, key, line, resp); err != nil {
		return Response{}, err
	}
	resp.Proof = ""
	if resp.Error != "" && !resp.Started {
		return resp, fmt.Errorf("bench %s: %s", c.Socket, resp.Error)
	}
	if len(resp.Stdout) > req.StdoutMax || len(resp.Stderr) > req.StderrMax {
		return Response{}, fmt.Errorf("bench %s: bad response: more output than the request's caps", c.Socket)
	}
	return resp, nil
}

// Ping asks the server for a proof under this start's key, running nothing: nil when
// the channel is this start's workbench server.
func (c Client) Ping(ctx context.Context) error {
	conn, key, line, err := c.dial(ctx, Request{Ping: true})
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(RequestTimeout))
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("bench %s: sending the ping: %w", c.Socket, err)
	}
	raw, err := readLine(bufio.NewReaderSize(conn, 64<<10), MaxResponse)
	if err != nil {
		return fmt.Errorf("bench %s: reading the answer to the ping: %w", c.Socket, err)
	}
	var resp Response
	if err := strictjson.Decode(raw, &resp); err != nil {
		return fmt.Errorf("bench %s: bad answer to the ping: %w", c.Socket, err)
	}
	if err := verify(c.Socket, key, line, resp); err != nil {
		return err
	}
	if resp.Error != "" {
		return fmt.Errorf("bench %s: %s", c.Socket, resp.Error)
	}
	return nil
}

// Stream runs req (Stream set) with stdin and stdout on the connection: it returns once
// the command started (or was refused: the error names the key), and then copies stdin to
// the command (closing its side at stdin's EOF) and the command's stdout to stdout until
// the command exits or ctx ends; done is closed then, with the copy's error in *err.
func (c Client) Stream(ctx context.Context, req Request, stdin io.Reader, stdout io.Writer) (done <-chan error, err error) {
	req.Stream = true
	conn, key, line, err := c.dial(ctx, req)
	if err != nil {
		return nil, err
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
	// The proof covers the request and this answer; what the command writes after it
	// is the command's own (an MCP server's stdout), read as untrusted anyway.
	if err := verify(c.Socket, key, line, resp); err != nil {
		conn.Close()
		return nil, err
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
