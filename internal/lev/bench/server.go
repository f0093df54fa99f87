package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/lever-jail/lever/internal/lev/strictjson"
)

// Server runs commands for the clients of one socket.
type Server struct {
	// Socket is the unix socket's path.
	Socket string
	// Reap makes the server reap every child that becomes its own (it is PID 1 of the
	// workbench container, or a subreaper): a killed command's orphans would otherwise
	// stay zombies until the container's pids limit is spent. Only for a process whose
	// other children are all the server's (lev bench serve), never in a test binary.
	Reap bool
	// CommandUID and CommandGID, when CommandIDs is set, are the ids a command has in its
	// own user namespace (mapped to the server's): the run user's, when the server itself
	// is root of a namespace of its own (see Hide).
	CommandUID, CommandGID int
	CommandIDs             bool
	// Key is this start's channel key (NewKey, ReadKey): every answer carries its proof
	// under it. Nil: answers carry none, which lev refuses.
	Key []byte
	// Logf receives one line per connection problem. Default: discard.
	Logf func(format string, args ...any)

	mu       sync.Mutex
	ours     map[int]bool // pids the server started and waits for itself
	degraded bool         // the kernel refused the namespaces once (logged once)
}

// noIsolation reports whether err is the kernel refusing the namespaces (as opposed to a
// missing binary or directory), and logs the first time. Called with s.mu held.
func (s *Server) noIsolation(err error) bool {
	var pe *os.PathError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Err {
	case syscall.EPERM, syscall.EACCES, syscall.EINVAL, syscall.ENOSPC, syscall.EUSERS:
	default:
		return false
	}
	if !s.degraded {
		s.degraded = true
		s.Logf("bench: the kernel refuses a new user and PID namespace (%v): commands with the network on run in a process group only, and what they leave with setsid outlives them; commands with the network off are refused", err)
	}
	return true
}

// Listen makes the socket: its parent must be a directory; a stale socket there (nothing
// answering) is replaced; anything else at the path, or a live server, is refused. The
// socket is 0600 from the moment it exists.
func (s *Server) Listen() (net.Listener, error) {
	if !filepath.IsAbs(s.Socket) {
		return nil, fmt.Errorf("bench socket %q is not an absolute path", s.Socket)
	}
	parent := filepath.Dir(s.Socket)
	fi, err := os.Lstat(parent)
	if err != nil {
		return nil, fmt.Errorf("bench socket %s: its parent: %w", s.Socket, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("bench socket %s: its parent %s is not a directory", s.Socket, parent)
	}
	if fi, err := os.Lstat(s.Socket); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("bench socket %s: something that is not a socket is there (%s); refusing to remove it", s.Socket, fi.Mode().Type())
		}
		if c, err := net.DialTimeout("unix", s.Socket, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("bench socket %s: another server is answering there", s.Socket)
		}
		if err := os.Remove(s.Socket); err != nil {
			return nil, fmt.Errorf("removing the stale bench socket: %w", err)
		}
	}
	// The umask makes the socket 0600 at creation (a chmod after would leave a window).
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", s.Socket)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("bench socket: %w", err)
	}
	if err := os.Chmod(s.Socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("bench socket: %w", err)
	}
	return ln, nil
}

// Serve accepts connections until ctx ends, one command each. Commands still running
// when ctx ends are killed.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.Logf == nil {
		s.Logf = func(string, ...any) {}
	}
	s.mu.Lock()
	s.ours = map[int]bool{}
	s.mu.Unlock()
	if s.Reap {
		go s.reaper(ctx)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("bench: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			s.handle(ctx, c)
		}()
	}
}

func (s *Server) handle(ctx context.Context, c net.Conn) {
	resp, line, streamed := s.serve(ctx, c)
	if streamed {
		return // the stream mode answered at start
	}
	sign(s.Key, line, &resp)
	b, err := json.Marshal(resp)
	if err == nil {
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Write(append(b, '\n'))
	}
	if err != nil {
		s.Logf("bench: writing the response: %v", err)
	}
}

// readLine reads one '\n'-terminated line of at most max bytes.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max+1 {
			return nil, fmt.Errorf("%w: line longer than %d bytes", errProtocol, max)
		}
		if err == nil {
			return line[:len(line)-1], nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: the line ends early (no newline)", errProtocol)
			}
			return nil, err
		}
	}
}

func refuse(err error) Response {
	r := Response{Error: err.Error()}
	var fe *FieldError
	if errors.As(err, &fe) {
		r.Field = fe.Field
	}
	return r
}

// serve answers one connection; it returns the answer and the request line it answers
// (for the proof), or streamed when the stream mode has answered itself.
func (s *Server) serve(ctx context.Context, c net.Conn) (Response, []byte, bool) {
	c.SetReadDeadline(time.Now().Add(RequestTimeout))
	br := bufio.NewReaderSize(c, 64<<10)
	line, err := readLine(br, MaxRequest)
	if err != nil {
		return refuse(fmt.Errorf("reading the request: %w", err)), nil, false
	}
	var req Request
	if err := strictjson.Decode(line, &req); err != nil {
		return refuse(fmt.Errorf("bench request refused, nothing ran: %w", err)), line, false
	}
	if err := req.Validate(); err != nil {
		return refuse(fmt.Errorf("bench request refused, nothing ran: %w", err)), line, false
	}
	c.SetReadDeadline(time.Time{})
	if req.Ping {
		return Response{}, line, false
	}
	if req.Stream {
		// What follows the request line is the command's stdin.
		resp, streamed := s.stream(ctx, c, br, &req, line)
		return resp, line, streamed
	}
	if br.Buffered() > 0 {
		return refuse(fmt.Errorf("bench request refused, nothing ran: %w: data after the request line", errProtocol)), line, false
	}
	return s.run(ctx, c, &req), line, false
}

// capture keeps the first max bytes read from r and drains the rest.
type capture struct {
	max  int
	buf  bytes.Buffer
	cut  bool
	done chan struct{}
}

func newCapture(r *os.File, max int) *capture {
	k := &capture{max: max, done: make(chan struct{})}
	go func() {
		defer close(k.done)
		p := make([]byte, 32<<10)
		for {
			n, err := r.Read(p)
			if room := k.max - k.buf.Len(); n > 0 {
				if n > room {
					k.buf.Write(p[:room])
					k.cut = true
				} else {
					k.buf.Write(p[:n])
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return k
}

// start starts req's command with the given streams, in its own namespaces (or, where the
// kernel refuses them and the network is on, its process group only), and remembers it as
// the server's own child.
func (s *Server) start(req *Request, stdin, stdout, stderr *os.File) (*exec.Cmd, error) {
	uid, gid := os.Getuid(), os.Getgid()
	if s.CommandIDs {
		uid, gid = s.CommandUID, s.CommandGID
	}
	cmd := &exec.Cmd{Path: req.Argv[0], Args: req.Argv, Dir: req.Dir,
		// Never nil: a nil Env would hand the command the server's environment.
		Env:    append(make([]string, 0, len(req.Env)), req.Env...),
		Stdout: stdout, Stderr: stderr,
		SysProcAttr: sysProcAttr(*req.Network, true, uid, gid)}
	if stdin != nil {
		// Not a nil *os.File in the interface: exec would take it for a file.
		cmd.Stdin = stdin
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := cmd.Start()
	// The fallback (a process group only) is for a server that runs without a channel to
	// hide (CommandIDs unset: a test's or a standalone server). The confined server never
	// takes it: run in the server's own user and mount namespace, as root there, a command
	// could unmount the cover over the channel's directory and read its key, and a command
	// can make the kernel refuse (ENOSPC: the user namespaces of the run user spent).
	if err != nil && *req.Network && !s.CommandIDs && s.noIsolation(err) {
		cmd = &exec.Cmd{Path: req.Argv[0], Args: req.Argv, Dir: cmd.Dir, Env: cmd.Env, Stdin: cmd.Stdin, Stdout: stdout, Stderr: stderr,
			SysProcAttr: sysProcAttr(true, false, 0, 0)}
		err = cmd.Start()
	}
	if err != nil {
		if !*req.Network {
			return nil, fmt.Errorf("network = false: could not start the command in a new user and network namespace (%v); it was not run, and it is never run with the network instead", err)
		}
		if s.CommandIDs {
			return nil, fmt.Errorf("could not start the command in a user, PID and mount namespace of its own (%v); it was not run: the workbench never runs a command beside its exec channel", err)
		}
		return nil, fmt.Errorf("starting %s: %w", req.Argv[0], err)
	}
	s.ours[cmd.Process.Pid] = true
	return cmd, nil
}

// stream runs a command with its stdin and stdout on the connection: the answer is one
// line at start, then stdout raw until the command exits. It ends (the group killed) when
// the command exits, at the deadline, when the server stops, when the client can no longer
// be written to, or StreamGrace after the client closed its side (the command's EOF).
func (s *Server) stream(ctx context.Context, c net.Conn, br *bufio.Reader, req *Request, line []byte) (Response, bool) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return refuse(fmt.Errorf("bench: %w", err)), false
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return refuse(fmt.Errorf("bench: %w", err)), false
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return refuse(fmt.Errorf("bench: %w", err)), false
	}
	cmd, err := s.start(req, inR, outW, errW)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return refuse(err), false
	}
	pid := cmd.Process.Pid
	stderr := newCapture(errR, req.StderrMax)
	started := Response{Started: true}
	sign(s.Key, line, &started)
	head, _ := json.Marshal(started)
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, werr := c.Write(append(head, '\n'))
	c.SetWriteDeadline(time.Time{})

	ended := make(chan struct{}, 3)
	eof := make(chan struct{})
	go func() {
		// The client's bytes are the command's stdin; its half-close (or going away) is EOF.
		io.Copy(inW, br)
		inW.Close()
		close(eof)
	}()
	go func() {
		// A client that no longer takes stdout is gone.
		io.Copy(c, outR)
		ended <- struct{}{}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	timer := time.NewTimer(req.Deadline())
	defer timer.Stop()
	if werr == nil {
		grace := (<-chan time.Time)(nil)
		for done := false; !done; {
			select {
			case <-waited:
				waited <- nil
				done = true
			case <-timer.C:
				done = true
			case <-ended:
				done = true
			case <-ctx.Done():
				done = true
			case <-eof:
				eof = nil
				grace = time.After(StreamGrace)
			case <-grace:
				done = true
			}
		}
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	<-waited
	s.mu.Lock()
	delete(s.ours, pid)
	s.mu.Unlock()
	outR.Close()
	errR.Close()
	<-stderr.done
	// Closing the connection (handle's defer) ends the client's stdout.
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	return Response{}, true
}

func (s *Server) run(ctx context.Context, c net.Conn, req *Request) Response {
	outR, outW, err := os.Pipe()
	if err != nil {
		return refuse(fmt.Errorf("bench: %w", err))
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return refuse(fmt.Errorf("bench: %w", err))
	}
	defer outR.Close()
	defer errR.Close()
	cmd, err := s.start(req, nil, outW, errW)
	outW.Close()
	errW.Close()
	if err != nil {
		return refuse(err)
	}
	pid := cmd.Process.Pid
	stdout, stderr := newCapture(outR, req.StdoutMax), newCapture(errR, req.StderrMax)

	// The client's side stays open while the command runs; EOF or any byte means it is
	// gone (or broke the framing): either way the command is not wanted any more.
	gone := make(chan struct{})
	go func() {
		var b [1]byte
		c.Read(b[:])
		close(gone)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	timer := time.NewTimer(req.Deadline())
	defer timer.Stop()
	var werr error
	timedOut, left := false, false
	select {
	case werr = <-waited:
	case <-timer.C:
		timedOut = true
	case <-gone:
		left = true
	case <-ctx.Done():
		left = true
	}
	// Whatever ended it, nothing of the command's process group outlives it: a background
	// job would otherwise escape the deadline.
	syscall.Kill(-pid, syscall.SIGKILL)
	if timedOut || left {
		werr = <-waited
	}
	s.mu.Lock()
	delete(s.ours, pid)
	s.mu.Unlock()
	// A process that left the group (setsid) can hold the pipes: do not wait for it.
	for _, k := range []*capture{stdout, stderr} {
		select {
		case <-k.done:
		case <-time.After(2 * time.Second):
		}
	}
	outR.Close()
	errR.Close()
	<-stdout.done
	<-stderr.done

	resp := Response{Started: true, TimedOut: timedOut,
		Stdout: stdout.buf.Bytes(), Stderr: stderr.buf.Bytes(),
		StdoutTruncated: stdout.cut, StderrTruncated: stderr.cut}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		resp.ExitCode = ee.ExitCode()
	default:
		resp.ExitCode = -1
		resp.Error = fmt.Sprintf("waiting for the command: %v", werr)
	}
	if timedOut && resp.ExitCode == 0 {
		resp.ExitCode = -1
	}
	if left {
		s.Logf("bench: client went away; killed process group %d", pid)
	}
	return resp
}
