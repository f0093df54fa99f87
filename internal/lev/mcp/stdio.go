package mcp

import (
	"context"
	"errors"
	"fmt"
	"github.com/lever-jail/lever/internal/lev/deathsig"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lever-jail/lever/internal/lev/capread"
)

// stderrTail is how much of a stdio server's stderr is kept for error messages. The rest
// is read and dropped, so a chatty server never blocks on a full pipe.
const stderrTail = 4 << 10

// closeGrace is how long a stdio server has to exit after its stdin closes (the MCP
// specification's stdio shutdown) before its process group is killed.
const closeGrace = 2 * time.Second

// stdioTransport runs a stdio server as a child in its own process group, with plain
// os.Pipe ends (no exec copying goroutines, so Wait never races the reader). The SDK's
// newline-delimited JSON codec reads the child's stdout only through capread's 1 MiB line
// reader.
type stdioTransport struct {
	name   string
	proc   Process
	stdin  *os.File // our write end
	stdout *os.File // our read end
	stderr *os.File // our read end
	lines  *capread.LineReader
	fault  *fault
	tail   *tailBuffer

	done    chan struct{} // closed when the child was reaped
	waitErr error

	closeOnce sync.Once
	ready     atomic.Bool // the handshake completed

	// writeTimeout bounds every write to the child's stdin (the session's deadline): a
	// server that stops reading fills the pipe, and a write with no deadline would block
	// its caller (a call, the SDK's Close) for good.
	writeTimeout time.Duration
}

// StdinError is a stdio server that stopped reading its stdin: a write to it did not
// complete within the session's deadline. The session is dropped and the server killed.
type StdinError struct {
	Server  string
	Timeout time.Duration
}

func (e *StdinError) Error() string {
	return fmt.Sprintf("MCP server %s stopped reading its stdin (a write did not complete within %s): dropped, and the server killed", e.Server, e.Timeout)
}

// directProcess is a server started by lev itself, in its own process group.
type directProcess struct{ cmd *exec.Cmd }

func (p directProcess) Wait() error { return p.cmd.Wait() }
func (p directProcess) Kill()       { syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

// spawnDirect is the default Spawner.
func spawnDirect(argv, env []string, dir string, stdin, stdout, stderr *os.File) (Process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	// Never nil: exec treats a nil Env as "inherit lev's environment".
	cmd.Env = append([]string{}, env...)
	cmd.Dir = dir
	// Own process group: Close kills the server and whatever it spawned (npx, node).
	// Pdeathsig: if lev dies without closing (SIGKILL), the kernel kills the server.
	cmd.SysProcAttr = deathsig.Set(&syscall.SysProcAttr{Setpgid: true})
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return directProcess{cmd}, nil
}

func startStdio(srv Server, f *fault, spawn Spawner, timeout time.Duration) (*stdioTransport, error) {
	if spawn == nil {
		spawn = spawnDirect
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	proc, err := spawn(append([]string{srv.Command}, srv.Args...), append([]string{}, srv.Env...), srv.Dir, inR, outW, errW)
	// The child holds its ends now; ours would keep the pipes open past its exit.
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("MCP server %s: starting %s: %w", srv.Name, srv.Command, err)
	}
	lines := capread.MCPLines(outR)
	lines.Peer = peer(srv.Name)
	t := &stdioTransport{
		name: srv.Name, proc: proc, stdin: inW, stdout: outR, stderr: errR,
		lines: lines, fault: f, tail: &tailBuffer{}, done: make(chan struct{}), writeTimeout: timeout,
	}
	go func() {
		io.Copy(t.tail, errR)
		errR.Close()
	}()
	go func() {
		t.waitErr = proc.Wait()
		close(t.done)
	}()
	return t, nil
}

// Connect hands the SDK its stdio codec over our capped reader and the child's stdin.
func (t *stdioTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	return (&sdk.IOTransport{Reader: &stdioReader{t: t}, Writer: &stdioWriter{t: t}}).Connect(ctx)
}

// stdioReader feeds the SDK one capped line at a time, newline restored. Past the cap it
// records the fault and drops the connection: the child is killed, the rest never read.
type stdioReader struct {
	t       *stdioTransport
	pending []byte
	nl      bool
	err     error
}

func (r *stdioReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if len(r.pending) == 0 && !r.nl {
		line, err := r.t.lines.Line()
		if err != nil {
			r.err = err
			if capread.IsCap(err) {
				r.t.fault.set(err)
				go r.t.shutdown(0) // dropped: no grace for a peer past a cap
			}
			return 0, err
		}
		r.pending, r.nl = line, true
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	if len(r.pending) == 0 && r.nl && n < len(p) {
		p[n] = '\n'
		n++
		r.nl = false
	}
	return n, nil
}

func (r *stdioReader) Close() error { return r.t.close() }

type stdioWriter struct{ t *stdioTransport }

// Write writes to the child's stdin under a deadline (os.Pipe's ends are pollable, so the
// deadline holds). Past it the server is taken to have stopped reading: the session's
// fault says so and the child is killed at once, without waiting on any I/O.
func (w *stdioWriter) Write(p []byte) (int, error) {
	if err := w.t.stdin.SetWriteDeadline(time.Now().Add(w.t.writeTimeout)); err != nil {
		return 0, err
	}
	n, err := w.t.stdin.Write(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		serr := &StdinError{Server: w.t.name, Timeout: w.t.writeTimeout}
		w.t.fault.set(serr)
		go w.t.shutdown(0)
		return n, serr
	}
	return n, err
}
func (w *stdioWriter) Close() error { return w.t.close() }

// close follows the MCP specification's stdio shutdown (close stdin, wait, then kill), bounded by
// closeGrace, and kills the whole process group so no grandchild outlives the session.
func (t *stdioTransport) close() error {
	// The MCP specification's grace is for a server that works: none before the handshake completed
	// (a server that failed it), none past a cap.
	grace := closeGrace
	if !t.ready.Load() || t.fault.get() != nil {
		grace = 0
	}
	t.shutdown(grace)
	return nil
}

func (t *stdioTransport) shutdown(grace time.Duration) {
	t.closeOnce.Do(func() {
		t.stdin.Close()
		select {
		case <-t.done:
		case <-time.After(grace):
		}
		t.proc.Kill()
		<-t.done
		t.stdout.Close()
	})
}

// diag describes a child that is gone: its exit status and the end of its stderr.
func (t *stdioTransport) diag() string {
	select {
	case <-t.done:
	default:
		return ""
	}
	msg := fmt.Sprintf("server exited (%v)", t.waitErr)
	if s := strings.TrimSpace(t.tail.String()); s != "" {
		msg += "; stderr ends: " + s
	}
	return msg
}

// tailBuffer keeps the last stderrTail bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(p) >= stderrTail {
		b.buf = append(b.buf[:0], p[len(p)-stderrTail:]...)
		return len(p), nil
	}
	if over := len(b.buf) + len(p) - stderrTail; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
