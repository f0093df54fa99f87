package cli

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/levstate"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

// serveOptions is `lev serve`.
type serveOptions struct {
	Listen, TokenFile string // "" means the config's
	AllowRemote       bool
}

func newServeCmd() *cobra.Command {
	opts := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the lev daemon (HTTP API; loopback by default; bearer token required)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(opts, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&opts.Listen, "listen", "", "address to listen on: host:port or unix:/abs/path.sock (default $LEV_LISTEN, else [daemon] listen, else "+levconfig.DefaultListen+")")
	cmd.Flags().StringVar(&opts.TokenFile, "token-file", "", "bearer token file (default $LEV_TOKEN_FILE, else [daemon] token_file, else $LEV_HOME/token; LEV_TOKEN overrides)")
	cmd.Flags().BoolVar(&opts.AllowRemote, "allow-remote", false, "allow a non-loopback listen address (trusted networks only)")
	return cmd
}

// runServe serves until SIGINT or SIGTERM: the daemon outlives the lev run that started
// it, so no command context bounds it.
func runServe(opts *serveOptions, stderr io.Writer) error {
	logger := log.New(stderr, "lev: ", log.LstdFlags|log.LUTC)
	w, err := levconfig.NewWatcher(levconfig.Path(), logger.Printf)
	if err != nil {
		return err
	}
	cfg := w.Current()
	listen, tokenFile := opts.Listen, opts.TokenFile
	if listen == "" {
		listen = cfg.Daemon.Listen
	}
	if tokenFile == "" {
		tokenFile = cfg.TokenFile()
	}
	token, err := daemon.ReadToken(tokenFile)
	if err != nil {
		return fmt.Errorf("refusing to start without a bearer token: %w", err)
	}
	// The token file this daemon uses is lev's state for every run, wherever
	// --token-file put it.
	if err := levstate.Register(tokenFile, "the daemon's bearer token"); err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	if err := daemon.CheckListen(listen, opts.AllowRemote); err != nil {
		return err
	}
	ln, err := daemon.Listen(listen)
	if err != nil {
		return err
	}
	// The pid file lets scripts (and tests) stop a daemon that lev run started.
	pidFile := filepath.Join(levconfig.Home(), "daemon.pid")
	if err := os.MkdirAll(levconfig.Home(), 0o700); err == nil {
		os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o600)
		defer os.Remove(pidFile)
	}
	eng := &runner.Engine{
		Store:     &runner.Store{Dir: filepath.Join(levconfig.Home(), "runs")},
		AgentsDir: agentsDir(),
		Config:    w.Current,
		Home:      pipeline.UserHome(),
		Log:       logger.Printf,
		Secrets:   []string{token},
		// The security steps, wired here and nowhere else.
		NewGate:     taintgate.Factory,
		NewExecutor: sandboxexec.Factory,
	}
	if err := eng.Validate(); err != nil {
		return err
	}
	eng.Recover()
	srv := &daemon.Server{Engine: eng, Watcher: w, Token: token, Log: logger.Printf}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger.Printf("serving on %s (config %s, runs %s, agents %s)", listenName(ln), levconfig.Path(), eng.Store.Dir, eng.AgentsDir)
	return srv.Serve(ctx, ln)
}

func listenName(ln net.Listener) string {
	if ln.Addr().Network() == "unix" {
		return "unix:" + ln.Addr().String()
	}
	return "http://" + ln.Addr().String()
}
