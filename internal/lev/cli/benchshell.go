package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/lev/bench"
)

// benchShellOptions is `lev bench shell --hide DIR -- CMD...`: what `lever shell` runs in
// the workbench.
type benchShellOptions struct {
	Hide  string
	Inner bool
}

// newBenchShellCmd: a process that `lever shell` starts in the workbench runs as the
// workbench's user, like the server, so without this it could replace the exec channel's
// socket (and answer lev's tool calls itself) or reach the serving process. Here it runs
// as lev's own commands do: in namespaces of its own where the channel's directory is
// covered by a tmpfs it cannot unmount, the server's processes out of its PID namespace.
func newBenchShellCmd() *cobra.Command {
	o := &benchShellOptions{}
	c := &cobra.Command{
		Use:   "shell --hide DIR -- CMD...",
		Short: "Run CMD (lever shell's session) confined as the workbench's commands are",
		Long: `lev bench shell runs CMD in a new user, PID and mount namespace where DIR (the exec
channel's directory) is covered by an empty read-only tmpfs that CMD cannot unmount: nothing
CMD starts can reach the channel's socket or the serving process. Its exit code is CMD's.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Hide == "" {
				return errors.New("bench shell: --hide DIR is required")
			}
			if o.Inner {
				return benchShellInner(o.Hide, args)
			}
			return benchShellOuter(o.Hide, args)
		},
	}
	c.Flags().StringVar(&o.Hide, "hide", "", "the exec channel's directory, covered for CMD")
	c.Flags().BoolVar(&o.Inner, "inner", false, "internal: the process that covers DIR")
	c.Flags().MarkHidden("inner")
	return c
}

// benchShellOuter starts the covering process as root of a user and mount namespace of
// its own (mapped to this process's ids), as bench serve does. Without user namespaces it
// refuses: an unconfined session could take the channel over.
func benchShellOuter(dir string, argv []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench shell: finding lev's own binary: %w", err)
	}
	child := exec.Command(self, append([]string{"bench", "shell", "--inner", "--hide", dir, "--"}, argv...)...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.SysProcAttr = bench.InnerAttr()
	// Not dumpable: this process is the workbench's user in the container's namespaces,
	// where the channel's directory is in reach; the session runs as the same uid, and
	// through the container's /proc could otherwise write this process's memory.
	bench.SetNotDumpable()
	return waitPassing(child, "bench shell: cannot make a user and mount namespace to hide the workbench's exec channel from the session (%v); not running it unconfined")
}

// benchShellInner covers dir, then runs argv one namespace further in, where the cover is
// locked.
func benchShellInner(dir string, argv []string) error {
	if err := bench.Hide(dir); err != nil {
		return fmt.Errorf("bench shell: %w", err)
	}
	// Not dumpable: the session runs as this process's uid outside its namespace, and
	// must not reach in here (/proc/<pid>/root shows the uncovered directory's parent).
	bench.SetNotDumpable()
	uid, gid, err := bench.OuterIDs()
	if err != nil {
		return fmt.Errorf("bench shell: %w", err)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return exitcode.New(127, fmt.Errorf("bench shell: %w", err))
	}
	child := exec.Command(path, argv[1:]...)
	child.Args[0] = argv[0]
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.SysProcAttr = bench.ShellAttr(uid, gid)
	return waitPassing(child, "bench shell: starting the session in namespaces of its own: %v")
}

// waitPassing runs child to its end and passes its exit code on. The terminal's signals
// (^C, ^\, ^Z, a hang-up) reach the whole foreground group, the session's command among
// it, which decides; this process only waits for it. Caught, not ignored: an ignored
// signal would stay ignored in the command across its exec, and ^C would not stop it.
func waitPassing(child *exec.Cmd, startErr string) error {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGHUP)
	defer signal.Stop(sig)
	go func() {
		for range sig {
		}
	}()
	if err := child.Start(); err != nil {
		return exitcode.New(126, fmt.Errorf(startErr, err))
	}
	err := child.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return exitcode.New(code, nil)
	}
	return err
}
