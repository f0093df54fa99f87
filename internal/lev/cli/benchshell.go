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
// the workbench. Stage says which of its three processes this is ("": the first).
type benchShellOptions struct {
	Hide  string
	Stage string
}

// The stages: the first (the workbench's user in the container's namespaces) starts the
// covering one (root of a user and mount namespace of its own, where it covers DIR), which
// starts the session's one (in a further user, PID and mount namespace, where the cover is
// locked), which becomes CMD. Each process makes itself non-dumpable (the session runs as
// the same uid outside, and the container's /proc would let it write a dumpable one's
// memory) only after its child exists: a non-dumpable parent cannot write a new user
// namespace's id maps. So each child waits, before it does anything, for a byte on fd 3,
// which its parent writes once it is not dumpable: nothing of the session runs before
// both are out of its reach.
const (
	stageCover   = "cover"
	stageSession = "session"
)

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
			switch o.Stage {
			case "":
				return benchShellOuter(o.Hide, args)
			case stageCover:
				return benchShellCover(o.Hide, args)
			case stageSession:
				return benchShellSession(args)
			}
			return fmt.Errorf("bench shell: unknown stage %q", o.Stage)
		},
	}
	c.Flags().StringVar(&o.Hide, "hide", "", "the exec channel's directory, covered for CMD")
	c.Flags().StringVar(&o.Stage, "stage", "", "internal: which of lev bench shell's processes this is")
	c.Flags().MarkHidden("stage")
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
	child := exec.Command(self, append([]string{"bench", "shell", "--stage", stageCover, "--hide", dir, "--"}, argv...)...)
	child.SysProcAttr = bench.InnerAttr()
	return runStaged(child, "bench shell: cannot make a user and mount namespace to hide the workbench's exec channel from the session (%v); not running it unconfined")
}

// benchShellCover covers dir, then starts the session's process one namespace further
// in, where the cover is locked.
func benchShellCover(dir string, argv []string) error {
	if err := waitGo(); err != nil {
		return err
	}
	if err := bench.Hide(dir); err != nil {
		return fmt.Errorf("bench shell: %w", err)
	}
	uid, gid, err := bench.OuterIDs()
	if err != nil {
		return fmt.Errorf("bench shell: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench shell: finding lev's own binary: %w", err)
	}
	child := exec.Command(self, append([]string{"bench", "shell", "--stage", stageSession, "--hide", dir, "--"}, argv...)...)
	child.SysProcAttr = bench.ShellAttr(uid, gid)
	return runStaged(child, "bench shell: starting the session in namespaces of its own: %v")
}

// benchShellSession becomes CMD, once its parent is out of reach.
func benchShellSession(argv []string) error {
	if err := waitGo(); err != nil {
		return err
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return exitcode.New(127, fmt.Errorf("bench shell: %w", err))
	}
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return exitcode.New(126, fmt.Errorf("bench shell: %s: %w", argv[0], err))
	}
	return nil
}

// waitGo waits for the parent's byte on fd 3 (runStaged), then closes it.
func waitGo() error {
	f := os.NewFile(3, "go")
	if f == nil {
		return errors.New("bench shell: no start pipe on fd 3 (an internal stage run by hand?)")
	}
	defer f.Close()
	var b [1]byte
	if n, err := f.Read(b[:]); n != 1 {
		return fmt.Errorf("bench shell: the parent stage went away before the start: %v", err)
	}
	return nil
}

// runStaged starts child with the terminal's streams and a start pipe on fd 3, makes this
// process non-dumpable, lets the child go, and waits for it, passing its exit code on.
// The terminal's signals (^C, ^\, ^Z, a hang-up) reach the whole foreground group, the
// session's command among it, which decides; this process only waits. Caught, not
// ignored: an ignored signal would stay ignored in the command across its exec.
func runStaged(child *exec.Cmd, startErr string) error {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGHUP)
	defer signal.Stop(sig)
	go func() {
		for range sig {
		}
	}()
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("bench shell: %w", err)
	}
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.ExtraFiles = []*os.File{r}
	err = child.Start()
	r.Close()
	if err != nil {
		w.Close()
		return exitcode.New(126, fmt.Errorf(startErr, err))
	}
	bench.SetNotDumpable()
	w.Write([]byte{1})
	w.Close()
	err = child.Wait()
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
