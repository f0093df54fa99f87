package sandbox

import (
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The warm container's PID 1 is lev's own (static) binary, bind-mounted read-only at
// KeepAlivePath and started as `KeepAlivePath KeepAliveArg`. It blocks reading the read
// end of a pipe that the engine passes in as fd 3 (podman's --preserve-fds); lev holds the
// only write end, close-on-exec, for as long as it lives. When lev dies, by any signal
// including SIGKILL, the kernel closes the write end, the read returns EOF, PID 1 exits,
// the kernel kills everything else in the container's PID namespace (a command, an MCP
// server), and --rm removes the container. Nothing depends on the image's tools.
const (
	KeepAlivePath = "/.lev-keepalive"
	KeepAliveArg  = "__sandbox-keepalive"
	// keepAliveReady is what PID 1 prints once it is non-dumpable; lev runs nothing in
	// the container before it has seen it.
	keepAliveReady = "lev keep-alive: ready"
	keepAliveFD    = 3
)

// KeepAliveMain is the keep-alive's body (lev's cli.Main calls it for KeepAliveArg,
// before anything else). It returns the exit code.
func KeepAliveMain() int {
	// Not dumpable: /proc/1/fd is then out of reach of the container's other processes
	// (every capability is dropped, CAP_SYS_PTRACE with them), so none can open the pipe
	// for writing and hold the container up after lev is gone.
	if err := prctlNotDumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "lev keep-alive: %v\n", err)
		return 1
	}
	// PID 1 gets only the signals it handles: ignore them all, so a command cannot stop
	// its own sandbox under later commands.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM)
	fmt.Println(keepAliveReady)
	f := os.NewFile(keepAliveFD, "lev-alive")
	if f == nil {
		fmt.Fprintln(os.Stderr, "lev keep-alive: no fd 3 (the engine did not pass lev's pipe)")
		return 1
	}
	// Orphans of the commands lev runs are re-parented here: reap them, so they cannot
	// fill the container's process cap as zombies.
	go func() {
		for {
			if _, err := syscall.Wait4(-1, nil, 0, nil); err == syscall.ECHILD {
				time.Sleep(time.Second)
			}
		}
	}()
	// lev never writes: a read returns only at EOF (lev is gone) or on an error.
	io.Copy(io.Discard, f)
	return 0
}

// alivePipe is lev's side: one per process, so every warm container of every run this lev
// (or daemon) starts ends with it. os.Pipe is close-on-exec: no child of lev (the engine
// client, a command, an MCP server) inherits the write end, so its closing is lev's death
// alone.
var (
	pipeOnce sync.Once
	pipeR    *os.File
	pipeW    *os.File
	pipeErr  error
)

// liveness returns the keep-alive's binary (exe, else lev's own) and the pipe's read end.
// An error says why a warm container cannot be tied to lev's life here (the caller
// refuses the container).
func liveness(exe string) (string, *os.File, error) {
	pipeOnce.Do(func() {
		pipeR, pipeW, pipeErr = os.Pipe()
		if pipeErr != nil {
			pipeErr = fmt.Errorf("sandbox keep-alive pipe: %w", pipeErr)
		}
	})
	if pipeErr != nil {
		return "", nil, pipeErr
	}
	// The write end is only ever held, never written: its closing at lev's death is the
	// signal. The package variable keeps it reachable (no finalizer may close it early);
	// this read says so where the read end is handed out.
	runtime.KeepAlive(pipeW)
	var err error
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return "", nil, fmt.Errorf("finding lev's own binary for the sandbox keep-alive: %w", err)
		}
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return "", nil, fmt.Errorf("finding lev's own binary for the sandbox keep-alive: %w", err)
	}
	if strings.ContainsAny(exe, ":,\n") {
		return "", nil, fmt.Errorf("lev's binary path %q contains ':', ',' or a newline and cannot be mounted into the sandbox as its keep-alive", exe)
	}
	if err := checkStatic(exe); err != nil {
		return "", nil, err
	}
	return exe, pipeR, nil
}

// checkStatic refuses a dynamically linked lev: it could not run in an image without its
// libraries (a busybox image has none).
func checkStatic(exe string) error {
	f, err := elf.Open(exe)
	if err != nil {
		return fmt.Errorf("reading lev's binary %s for the sandbox keep-alive: %w", exe, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("lev's binary %s is dynamically linked and cannot be the container sandbox's keep-alive; build lev with CGO_ENABLED=0 (make build does)", exe)
		}
	}
	return nil
}

// awaitKeepAlive waits (bounded) until the container's PID 1 says it is non-dumpable: a
// command run before that could open /proc/1/fd/3 for writing and outlive lev.
func (m *Manager) awaitKeepAlive(ctx context.Context, eng []string, name string) error {
	ctx, cancel := context.WithTimeout(ctx, keepAliveWait)
	defer cancel()
	for {
		out, err := m.r.output(ctx, append(append([]string{}, eng...), "logs", name))
		if err == nil && strings.Contains(out, keepAliveReady) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the keep-alive of container %s did not report ready within %s (it ties the container to lev's life; last: %v %q)", name, keepAliveWait, err, out)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// keepAliveWait bounds awaitKeepAlive (the machine may be loaded).
const keepAliveWait = 60 * time.Second
