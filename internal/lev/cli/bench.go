package cli

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/lev/bench"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "The workbench: where an agent's shell commands run, apart from lev",
		Args:  cobra.NoArgs,
	}
	var socket string
	serve := &cobra.Command{
		Use:   "serve --socket PATH",
		Short: "Run commands for lev over a unix socket (the workbench container's entrypoint)",
		Long: `lev bench serve listens on a unix socket (mode 0600) and runs one command per
connection, as lev's shell tool asks: in the given directory, with exactly the given
environment, in a process group of its own that is killed at the deadline or when lev
goes away; with the network off, in a new user and network namespace, or not at all.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if socket == "" {
				return &ExitError{Code: 2, Err: errors.New("bench serve: --socket PATH is required")}
			}
			logger := log.New(cmd.ErrOrStderr(), "lev bench: ", log.LstdFlags|log.LUTC)
			s := &bench.Server{Socket: socket, Reap: true, Logf: logger.Printf}
			ln, err := s.Listen()
			if err != nil {
				return &ExitError{Code: 2, Err: err}
			}
			defer os.Remove(socket)
			// Orphans of killed commands come here to be reaped (PID 1 of the workbench
			// already gets them; elsewhere the subreaper bit makes it so).
			if err := bench.SetSubreaper(); err != nil {
				logger.Printf("cannot become a subreaper (%v): orphans of killed commands go to init", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			logger.Printf("serving on %s", socket)
			if err := s.Serve(ctx, ln); err != nil {
				return fmt.Errorf("bench serve: %w", err)
			}
			return nil
		},
	}
	serve.Flags().StringVar(&socket, "socket", "", "the unix socket to listen on (absolute path; its directory must exist)")
	cmd.AddCommand(serve)
	return cmd
}
