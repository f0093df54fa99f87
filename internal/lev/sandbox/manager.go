package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/lever-jail/lever/internal/fspath"
)

// Options are the host-side settings of sandboxes. They come from the user's config, never
// from a blueprint: the engine binary in particular.
type Options struct {
	// Engine is the container engine binary (podman, docker, or any Docker-CLI-compatible
	// one). Empty: the user's [sandbox] engine, else podman if on PATH, else docker.
	Engine string
	// EngineArgs go before the subcommand (e.g. podman's "--runtime runc").
	EngineArgs []string
	// RunArgs are extra `run` flags (e.g. "--ulimit nofile=1024:1024" for rootful podman).
	RunArgs []string
	// PidsLimit and Memory cap every container (defaults 512 and "2g").
	PidsLimit int
	Memory    string
	// Credential and Env run engine and namespace commands as another user (a root daemon
	// running one user's agents; the tests' unprivileged user).
	Credential *syscall.Credential
	Env        []string
	// RunID goes into container names so concurrent runs never share a container.
	RunID string
	// Logf receives warnings (the on_unavailable = "warn" fallback). Default: discard.
	Logf func(format string, args ...any)
	// LookPath finds binaries (default exec.LookPath).
	LookPath func(string) (string, error)
	// BenchSocket, when set, is the workbench's exec channel ($LEV_BENCH_SOCKET): every
	// command of every kind runs there, and nothing runs in lev's own container (no host,
	// namespace or container fallback, whatever on_unavailable says).
	BenchSocket string
	// KeepAlive is the static lev binary that is PID 1 of every warm container
	// (keepalive.go). Empty: this process's own executable. Tests set it to a copy the
	// engine's user can reach.
	KeepAlive string
}

// Defaults for the container caps.
const (
	DefaultPidsLimit = 512
	DefaultMemory    = "2g"
)

// Manager hands out executors for a run and owns the run's warm containers: one per
// distinct configuration, shared by every stage with identical settings, removed by Close.
type Manager struct {
	o Options
	r runner

	mu         sync.Mutex
	noted      map[string]bool
	containers map[string]*containerExec
	persistent map[string]bool
	closed     bool
}

// NewManager returns a Manager for one run.
func NewManager(o Options) *Manager {
	if o.PidsLimit == 0 {
		o.PidsLimit = DefaultPidsLimit
	}
	if o.Memory == "" {
		o.Memory = DefaultMemory
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.LookPath == nil {
		o.LookPath = TrustedLookPath
	}
	if o.RunID == "" {
		var b [4]byte
		rand.Read(b[:])
		o.RunID = hex.EncodeToString(b[:])
	}
	return &Manager{o: o, r: runner{cred: o.Credential, env: o.Env},
		containers: map[string]*containerExec{}, persistent: map[string]bool{}}
}

// UnavailableError says the configured mechanism cannot run here.
type UnavailableError struct {
	Kind   string
	Reason string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("sandbox kind %q is unavailable: %s (on_unavailable = \"error\"; set on_unavailable = \"warn\" to run on the host instead)", e.Kind, e.Reason)
}

// Executor returns the executor for cfg (already merged with Merge) and the run's workdir.
// Containers start on first use and are reused for every later call with the same
// settings. When the mechanism is unavailable, on_unavailable decides: "error" (default)
// returns an *UnavailableError so the agent fails to spawn; "warn" logs and returns a host
// executor.
func (m *Manager) Executor(ctx context.Context, cfg Config, workdir string) (Executor, error) {
	return m.ExecutorMasked(ctx, cfg, workdir, nil)
}

// ExecutorMasked is Executor for a run whose commands must not see mask (lev's own state,
// absolute resolved paths): a container gets an empty tmpfs (or /dev/null) over each one
// that lies in the workdir, and refuses an extra mount that would expose one. Kinds that
// share the host's filesystem mask per command (Command.Mask).
func (m *Manager) ExecutorMasked(ctx context.Context, cfg Config, workdir string, mask []string) (Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(workdir) {
		return nil, fmt.Errorf("sandbox workdir %q is not absolute", workdir)
	}
	if m.o.BenchSocket != "" {
		m.benchNote(cfg)
		return NewBenchExecutor(m.o.BenchSocket, cfg.NetworkOn(), workdir), nil
	}
	var ex Executor
	var err error
	switch cfg.Kind {
	case "", KindNone:
		return hostExec{m.r}, nil
	case KindNamespace:
		ex, err = m.namespace(ctx, cfg)
	case KindContainer:
		ex, err = m.container(ctx, cfg, workdir, mask)
	}
	var ue *UnavailableError
	if errors.As(err, &ue) && cfg.OnUnavailable == OnUnavailableWarn {
		m.o.Logf("sandbox: %s unavailable (%s); on_unavailable = \"warn\": running on the host", ue.Kind, ue.Reason)
		return hostExec{m.r}, nil
	}
	return ex, err
}

// Check reports, without starting anything, whether cfg can run here: nil, a config error
// (a *FieldError), or an *UnavailableError. A run checks every stage's sandbox when it
// spawns, so on_unavailable = "error" fails the spawn rather than a later tool call.
func (m *Manager) Check(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if m.o.BenchSocket != "" {
		return m.checkBench(ctx, cfg)
	}
	switch cfg.Kind {
	case KindNamespace:
		_, err := m.namespace(ctx, cfg)
		return err
	case KindContainer:
		s, err := m.SpecFor(cfg, "/")
		if err != nil {
			return err
		}
		if _, err := m.o.LookPath(s.Engine); err != nil {
			return &UnavailableError{KindContainer, fmt.Sprintf("container engine %q not found on PATH", s.Engine)}
		}
	}
	return nil
}

func (m *Manager) namespace(ctx context.Context, cfg Config) (Executor, error) {
	if runtime.GOOS != "linux" {
		return nil, &UnavailableError{KindNamespace, "namespaces exist only on Linux"}
	}
	unshare, err := m.o.LookPath("unshare")
	if err != nil {
		return nil, &UnavailableError{KindNamespace, "unshare (util-linux) not found on PATH"}
	}
	n := nsExec{r: m.r, unshare: unshare, network: cfg.NetworkOn()}
	// Probe once: user namespaces can be disabled by sysctl or seccomp.
	res, err := n.Run(ctx, Command{Script: "true"})
	if err != nil || res.ExitCode != 0 {
		return nil, &UnavailableError{KindNamespace, fmt.Sprintf("cannot create namespaces: %v %s", err, strings.TrimSpace(string(res.Stderr)))}
	}
	return n, nil
}

// EngineFor is the engine binary: the user's choice, else podman, else docker.
func (m *Manager) EngineFor(cfg Config) string {
	if m.o.Engine != "" {
		return m.o.Engine
	}
	if cfg.Engine != "" {
		return cfg.Engine
	}
	if _, err := m.o.LookPath("podman"); err == nil {
		return "podman"
	}
	return "docker"
}

// Spec is everything that shapes a warm container; its hash names the container.
type Spec struct {
	Engine     string
	EngineArgs []string
	Image      string
	Network    bool
	Mounts     []Mount
	Workdir    string
	PidsLimit  int
	Memory     string
	RunArgs    []string
	Persist    bool
	// Mask are protected paths in the workdir, hidden from the container: each directory
	// under an empty read-only directory (EmptyDir), each file under /dev/null.
	Mask     []string
	EmptyDir string
	// KeepAlive is lev's own static binary: set, the warm container's PID 1 is it, reading
	// the pipe passed as fd 3 until lev dies (keepalive.go), and the container is --rm.
	// Empty (a persistent container, an engine without --preserve-fds): PID 1 sleeps.
	KeepAlive string
}

// Key is the configuration hash: equal specs share one container.
func (s Spec) Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q %t %q %d %q %q %t", s.Engine, s.EngineArgs, s.Image, s.Network, s.Workdir, s.PidsLimit, s.Memory, s.RunArgs, s.Persist)
	for _, m := range s.Mounts {
		fmt.Fprintf(h, " %q", m.String())
	}
	for _, p := range s.Mask {
		fmt.Fprintf(h, " mask %q", p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// RunArgv is the `run` that starts a container (pure; tested as such). Every capability
// is dropped, privileges cannot be regained, process count and memory are capped, and the
// workdir is bind-mounted at the same path. detach starts the warm container (name, a
// keep-alive PID 1); otherwise it is a one-shot `run --rm` of cmd. The image's own
// ENTRYPOINT is always replaced, so an image cannot wrap or swallow the command.
func (s Spec) RunArgv(name string, detach bool, cmd ...string) []string {
	argv := append([]string{s.Engine}, s.EngineArgs...)
	argv = append(argv, "run")
	if detach {
		argv = append(argv, "-d")
	}
	if !detach || s.KeepAlive != "" {
		argv = append(argv, "--rm")
	}
	if name != "" {
		argv = append(argv, "--name", name)
	}
	argv = append(argv,
		"--label", "lev.sandbox="+s.Key(),
		"--cap-drop=ALL",
		"--security-opt", "no-new-privileges",
		"--pids-limit", strconv.Itoa(s.PidsLimit),
		"--memory", s.Memory,
	)
	if !s.Network {
		argv = append(argv, "--network", "none")
	}
	argv = append(argv, "-v", s.Workdir+":"+s.Workdir+":rw", "-w", s.Workdir)
	for _, m := range s.Mounts {
		argv = append(argv, "-v", m.String())
	}
	for _, d := range maskPins(s.Workdir, s.Mask) {
		// Each directory between the workdir and a mask is a mount point of its own, so a
		// command cannot rename it (EBUSY) and carry the mask away with the old name,
		// leaving the path free for a config of its making.
		argv = append(argv, "-v", d+":"+d+":rw")
	}
	for _, p := range s.Mask {
		// Over the workdir's bind mount: lev's state inside it is not there to read. With
		// every capability dropped, nothing in the container can unmount these. A bind of
		// an empty directory, not a tmpfs: podman's tmpfs copies up what it covers.
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			argv = append(argv, "-v", "/dev/null:"+p+":ro")
		} else {
			argv = append(argv, "-v", s.EmptyDir+":"+p+":ro")
		}
	}
	argv = append(argv, s.RunArgs...)
	if detach && s.KeepAlive != "" {
		// PID 1 ends when lev does (its pipe's write end closes), and the container with
		// it. lev's binary is read-only in the container; it holds no state.
		argv = append(argv, "-v", s.KeepAlive+":"+KeepAlivePath+":ro", "--preserve-fds", "1")
		cmd = []string{KeepAlivePath, KeepAliveArg}
	} else if detach {
		cmd = []string{"sleep", "2147483647"}
	}
	if detach {
		// PID 1 ignores SIGTERM, so stop with KILL: teardown is immediate.
		argv = append(argv, "--stop-signal", "KILL")
	}
	if len(cmd) == 0 {
		cmd = []string{"true"}
	}
	argv = append(argv, "--entrypoint", cmd[0], s.Image)
	return append(argv, cmd[1:]...)
}

// SpecFor builds the container spec for cfg and workdir.
func (m *Manager) SpecFor(cfg Config, workdir string) (Spec, error) {
	s := Spec{Engine: m.EngineFor(cfg), EngineArgs: m.o.EngineArgs, Image: cfg.Image, Network: cfg.NetworkOn(),
		Workdir: filepath.Clean(workdir), PidsLimit: m.o.PidsLimit, Memory: m.o.Memory, RunArgs: m.o.RunArgs, Persist: cfg.PersistOn()}
	if s.Image == "" {
		return s, &FieldError{"image", "kind = \"container\" needs an image"}
	}
	if strings.ContainsAny(s.Workdir, ":,\n") {
		// The engine's -v syntax splits on ':' (and --mount on ','): such a path could be
		// read as a different mount, so refuse it rather than quote it.
		return s, fmt.Errorf("workdir %q contains ':', ',' or a newline and cannot be bind-mounted safely", s.Workdir)
	}
	for _, raw := range cfg.AllMounts() {
		mt, err := ParseMount(raw)
		if err != nil {
			return s, &FieldError{"mounts", err.Error()}
		}
		s.Mounts = append(s.Mounts, mt)
	}
	return s, nil
}

func (m *Manager) container(ctx context.Context, cfg Config, workdir string, mask []string) (Executor, error) {
	s, err := m.SpecFor(cfg, workdir)
	if err != nil {
		return nil, err
	}
	for _, p := range mask {
		if fspath.Within(s.Workdir, p) && !maskedAbove(p, mask) && !exists(p) {
			// Nothing to mount over, and the container shares the workdir read-write: a
			// command could create it (a worker's config.toml, a policy file) and choose
			// what a later run loads.
			return nil, fmt.Errorf("lev's state %s lies in the workdir but does not exist yet, so the container cannot be kept from creating it; create it before the run (or use kind = \"none\"/\"namespace\", which keep its directory read-only)", p)
		}
		if fspath.Within(s.Workdir, p) && !maskedAbove(p, mask) && exists(p) {
			if strings.ContainsAny(p, ":,\n") {
				return nil, fmt.Errorf("lev's state %q is in the workdir and its name cannot be masked in a container mount", p)
			}
			s.Mask = append(s.Mask, p)
			if s.EmptyDir, err = emptyDir(); err != nil {
				return nil, fmt.Errorf("masking lev's state in the container: %w", err)
			}
		}
		for _, mt := range s.Mounts {
			src, err := filepath.EvalSymlinks(mt.Src)
			if err != nil {
				src = filepath.Clean(mt.Src)
			}
			if fspath.Within(src, p) || fspath.Within(p, src) {
				return nil, fmt.Errorf("sandbox mount %s would expose lev's own state %s to the container; mount something that neither holds nor lies in it", mt.String(), p)
			}
		}
	}
	if _, err := m.o.LookPath(s.Engine); err != nil {
		return nil, &UnavailableError{KindContainer, fmt.Sprintf("container engine %q not found on PATH", s.Engine)}
	}
	key := s.Key()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("sandbox manager is closed: the run has ended")
	}
	if c, ok := m.containers[key]; ok {
		return c, nil
	}
	eng := append([]string{s.Engine}, s.EngineArgs...)
	name := "lev-sbx-" + key + "-" + m.o.RunID
	if s.Persist {
		name = "lev-sbx-" + key
		// A persistent container from an earlier run is reused as is, but only one lev
		// created with exactly these settings: the name is predictable, and a container
		// of that name made by anyone else (an extra mount of lev's home, capabilities
		// kept) would otherwise be adopted. podman records the command that created a
		// container; anything else, or a different command, is removed and made anew.
		state, err := m.r.output(ctx, append(append([]string{}, eng...), "inspect", "-f", "{{.State.Running}}", name))
		if err == nil && !m.createdAs(ctx, eng, name, s.RunArgv(name, true)) {
			m.o.Logf("sandbox: %s was not created by lev with these settings; removing it and starting a new one", name)
			if _, rerr := m.r.output(ctx, append(append([]string{}, eng...), "rm", "-f", name)); rerr != nil {
				return nil, fmt.Errorf("removing a container lev did not create under its name %s: %w", name, rerr)
			}
			err = errors.New("removed")
		}
		if err == nil {
			if state != "true" {
				if _, err := m.r.output(ctx, append(append([]string{}, eng...), "start", name)); err != nil {
					return nil, fmt.Errorf("restarting persistent sandbox %s: %w", name, err)
				}
			}
			c := &containerExec{r: m.r, engine: eng, name: name}
			m.containers[key], m.persistent[key] = c, true
			return c, nil
		}
	}
	c0 := Command{}
	if s.Persist {
		// Kept across runs by design: PID 1 sleeps, and the next run adopts it.
	} else if filepath.Base(s.Engine) == "podman" || strings.HasPrefix(filepath.Base(s.Engine), "podman-") {
		// The container must not outlive lev: PID 1 reads a pipe whose only write end lev
		// holds (keepalive.go). podman passes the read end in with --preserve-fds.
		exe, r, err := liveness(m.o.KeepAlive)
		if err != nil {
			return nil, fmt.Errorf("starting sandbox container: %w", err)
		}
		s.KeepAlive = exe
		c0.extraFiles = []*os.File{r}
	} else {
		m.o.Logf("sandbox: engine %s cannot pass lev's liveness pipe (podman's --preserve-fds); container %s survives a lev killed by SIGKILL until the next teardown", s.Engine, name)
	}
	res, err := m.r.run(ctx, s.RunArgv(name, true), c0)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		// Remove a half-created container so a retry does not collide with its name.
		m.r.output(context.WithoutCancel(ctx), append(append([]string{}, eng...), "rm", "-f", name))
		return nil, fmt.Errorf("starting sandbox container: %w", err)
	}
	if s.KeepAlive != "" {
		if err := m.awaitKeepAlive(ctx, eng, name); err != nil {
			m.r.output(context.WithoutCancel(ctx), append(append([]string{}, eng...), "rm", "-f", name))
			return nil, fmt.Errorf("starting sandbox container: %w", err)
		}
	}
	if msg := strings.TrimSpace(string(res.Stderr)); msg != "" {
		// E.g. rootless podman on cgroup v1: "Resource limits are not supported and
		// ignored". The container runs, but the user must hear that its caps do not hold.
		m.o.Logf("sandbox: container %s started, but the engine warned: %s", name, msg)
	}
	c := &containerExec{r: m.r, engine: eng, name: name}
	m.containers[key], m.persistent[key] = c, s.Persist
	return c, nil
}

// Containers lists the names of the warm containers this manager started or adopted.
func (m *Manager) Containers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, c := range m.containers {
		out = append(out, c.name)
	}
	return out
}

// Close tears down the run's containers (persistent ones stay). Call it when the run
// ends, however it ends.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	var errs []error
	for key, c := range m.containers {
		if m.persistent[key] {
			continue
		}
		if _, err := m.r.output(context.Background(), append(append([]string{}, c.engine...), "rm", "-f", c.name)); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox container %s: %w", c.name, err))
		}
		delete(m.containers, key)
	}
	return errors.Join(errs...)
}

var (
	emptyOnce sync.Once
	emptyPath string
	emptyErr  error
)

// emptyDir is an empty, read-only directory the daemon makes once: what a container sees
// in place of lev's state.
func emptyDir() (string, error) {
	emptyOnce.Do(func() {
		emptyPath, emptyErr = os.MkdirTemp("", "lev-masked-")
		if emptyErr == nil {
			emptyErr = os.Chmod(emptyPath, 0o555)
		}
	})
	return emptyPath, emptyErr
}

// maskedAbove reports whether another mask entry holds p (hiding that one hides p).
func maskedAbove(p string, mask []string) bool {
	for _, q := range mask {
		if q != p && fspath.Within(q, p) {
			return true
		}
	}
	return false
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// maskPins lists the directories strictly between workdir and each masked path, parents
// first, each once.
func maskPins(workdir string, mask []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range mask {
		var chain []string
		for d := filepath.Dir(p); fspath.Within(workdir, d) && d != workdir && !seen[d]; d = filepath.Dir(d) {
			seen[d] = true
			chain = append(chain, d)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			out = append(out, chain[i])
		}
	}
	return out
}

// createdAs reports whether the engine recorded argv as the command that created name
// (podman's Config.CreateCommand). An engine that records nothing answers false.
func (m *Manager) createdAs(ctx context.Context, eng []string, name string, argv []string) bool {
	out, err := m.r.output(ctx, append(append([]string{}, eng...), "inspect", "-f", "{{json .Config.CreateCommand}}", name))
	if err != nil {
		return false
	}
	var got []string
	if json.Unmarshal([]byte(out), &got) != nil || len(got) != len(argv) || len(got) == 0 {
		return false
	}
	for i := 1; i < len(got); i++ { // [0] is the engine as it was invoked
		if got[i] != argv[i] {
			return false
		}
	}
	return true
}
