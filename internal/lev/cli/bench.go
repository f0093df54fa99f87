package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/lev/bench"
)

// benchServeOptions is `lev bench serve --socket PATH`.
type benchServeOptions struct {
	Socket string
	Inner  bool // this process is the serving one benchOuter started
}

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "The workbench: where an agent's shell commands run, apart from lev",
		Args:  cobra.NoArgs,
	}
	opts := &benchServeOptions{}
	serve := &cobra.Command{
		Use:   "serve --socket PATH",
		Short: "Run commands for lev over a unix socket (the workbench container's entrypoint)",
		Long: `lev bench serve listens on a unix socket (mode 0600) and runs one command per
connection, as lev's shell tool asks: in the given directory, with exactly the given
environment, in namespaces of its own that die with it, killed at the deadline or when lev
goes away; with the network off, in a new network namespace, or not at all. The commands
never see the socket's directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchServe(opts, cmd.ErrOrStderr())
		},
	}
	serve.Flags().StringVar(&opts.Socket, "socket", "", "the unix socket to listen on (absolute path; its directory must exist)")
	serve.Flags().BoolVar(&opts.Inner, "inner", false, "internal: the serving process, started by lev bench serve itself")
	serve.Flags().MarkHidden("inner")
	cmd.AddCommand(serve, newBenchShellCmd())
	return cmd
}

func runBenchServe(opts *benchServeOptions, stderr io.Writer) error {
	if opts.Socket == "" {
		return errors.New("bench serve: --socket PATH is required")
	}
	logger := log.New(stderr, "lev bench: ", log.LstdFlags|log.LUTC)
	if opts.Inner {
		return benchInner(opts.Socket, logger)
	}
	return benchOuter(opts.Socket, logger)
}

// benchOuter makes the socket, then serves from a second process that is root of a user
// and mount namespace of its own, where the socket's directory is covered: no command can
// reach the socket (to put a server of its own there for a later network=false command).
// This process only waits, not dumpable (so /proc/<pid>/root of it is no way back to the
// socket either), and removes the socket at the end.
func benchOuter(socket string, logger *log.Logger) error {
	// This start's key before the socket: a client that finds the socket finds the key
	// its answers are proven under.
	key, err := bench.NewKey(socket)
	if err != nil {
		return err
	}
	s := &bench.Server{Socket: socket, Logf: logger.Printf, Key: key}
	ln, err := s.Listen()
	if err != nil {
		return err
	}
	defer os.Remove(socket)
	ul := ln.(*net.UnixListener)
	f, err := ul.File()
	if err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench serve: finding lev's own binary: %w", err)
	}
	child := exec.Command(self, "bench", "serve", "--inner", "--socket", socket)
	// lev's own descriptors, not the command's writers: a writer that is not a file would
	// put a copying goroutine in this process between the server and its log.
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	child.ExtraFiles = []*os.File{f}
	child.SysProcAttr = bench.InnerAttr()
	if err := child.Start(); err != nil {
		// Without a user and mount namespace nothing can cover the socket's directory:
		// every command (the agent's own shell calls, not only lever shell) would run as
		// this uid beside the channel's key and could answer lev in the server's place.
		// An unauthenticated channel is worse than none: refuse, and say why.
		f.Close()
		return exitcode.New(1, fmt.Errorf("bench serve: cannot make a user and mount namespace to hide the exec channel from the commands (%v); not serving unconfined: every command could read the channel's key and answer lev in the workbench's place (allow unprivileged user namespaces in the guest)", err))
	}
	f.Close()
	bench.SetNotDumpable()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for x := range sig {
			child.Process.Signal(x)
		}
	}()
	err = child.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return exitcode.New(1, fmt.Errorf("bench serve: the serving process ended: %v", err))
	}
	return err
}

// benchInner is the serving process: it covers the socket's directory, then serves on the
// listening socket it inherited (fd 3).
func benchInner(socket string, logger *log.Logger) error {
	f := os.NewFile(3, "bench-socket")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("bench serve --inner: no listening socket on fd 3: %w", err)
	}
	// read before Hide covers it
	key, err := bench.ReadKey(socket)
	if err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	if err := bench.Hide(filepath.Dir(socket)); err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	// Not dumpable: the commands (and lever shell's sessions) run as this process's uid
	// outside its namespace, and a dumpable server's /proc/<pid>/mem would be theirs to
	// write, the channel with it.
	bench.SetNotDumpable()
	uid, gid, err := bench.OuterIDs()
	if err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	s := &bench.Server{Socket: socket, Logf: logger.Printf, Key: key, CommandUID: uid, CommandGID: gid, CommandIDs: true}
	return benchServe(s, ln, logger)
}

func benchServe(s *bench.Server, ln net.Listener, logger *log.Logger) error {
	// Orphans of killed commands come here to be reaped.
	s.Reap = true
	if err := bench.SetSubreaper(); err != nil {
		logger.Printf("cannot become a subreaper (%v): orphans of killed commands go to init", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger.Printf("serving on %s", s.Socket)
	if err := s.Serve(ctx, ln); err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	return nil
}
