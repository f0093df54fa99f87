// Package orbstack is the OrbStack backend: the jail is an OrbStack *isolated* machine
// (`orb create --isolated`), which shares none of the Mac's files and cannot reach the
// Mac over the network except through the host.orb.internal alias, with exactly one host
// directory mounted: the project tree at /lever.
//
// OrbStack runs only on macOS, so lever drives the `orb` CLI through one exec seam (Exec)
// and its tests replay recorded `orb` outputs against exact argv (testdata/scenarios).
// It owns the machine and its forwards; it must not run anything in the guest except
// through its guest.Runner.
package orbstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
)

const (
	// Tool is the binary lever drives.
	Tool = "orb"
	// AliasName is the name an OrbStack machine resolves to reach the Mac's loopback.
	AliasName = "host.orb.internal"
	// MountPoint is where the tree appears in the machine.
	MountPoint = "/lever"
	// DefaultImage is the distro[:version] lever creates the machine from: Debian 12, the
	// release the rest of lever's guest tooling (iptables, rootless podman) is tested on.
	DefaultImage = "debian:bookworm"
	// DefaultRunUser is the machine's unprivileged run user that owns rootless podman.
	DefaultRunUser = "lever"
)

var profile = backend.Profile{
	Name:               "orbstack",
	HypervisorBoundary: true,
	Kernel:             "separate from host; one kernel shared by every OrbStack machine and container",
	FilesystemBound:    "isolated machine: no Mac files; one bind mount, the tree at /lever",
	EgressEnforced:     "iptables LEVER_EGRESS in the machine's own network namespace",
	RootlessRuntime:    "rootless podman as the run user (rootful containers fail: the isolated machine's seccomp blocks bpf())",
	Caveats: []string{
		"one Linux kernel is shared by the manager, all workers and every other OrbStack machine and container: a kernel exploit crosses between them (docs/design/sandboxing-approaches.md)",
		"LAN unreachability rests on OrbStack's routing for isolated machines backed by lever's private-range DROPs; re-check it on OrbStack upgrades",
		"host.orb.internal forwards to all of the Mac's loopback; only the allowlisted ports are open, by LEVER_EGRESS",
		"root commands run as `orb -u root`; the machine survives `lever stop` and Mac reboots until `lever destroy`",
		"disk and lima.* settings are not applied: OrbStack machines share the OrbStack VM's disk and CPUs",
	},
}

func init() {
	backend.Register(backend.Descriptor{
		Profile: profile,
		Probe:   func(ctx context.Context) backend.Availability { return Probe(ctx, HostExec{}, ProbeEnv{}) },
		New: func(cfg *config.Config) (backend.Backend, error) {
			return New(Options{Machine: cfg.MachineName(), Tree: cfg.TreePath, StateDir: cfg.StateDir()})
		},
	})
}

// Exec runs the orb binary on the host. It is the backend's one seam to OrbStack: the
// real one is HostExec; tests put a fake orb behind it.
type Exec interface {
	// Run runs `orb argv...` with stdin. A non-zero exit is reported in exit, not err;
	// err means orb could not be run at all.
	Run(ctx context.Context, argv []string, stdin []byte) (stdout, stderr []byte, exit int, err error)
}

// HostExec runs the orb binary found at Path (default: "orb" on PATH).
type HostExec struct{ Path string }

// Run implements Exec.
func (h HostExec) Run(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, int, error) {
	bin := h.Path
	if bin == "" {
		bin = Tool
	}
	cmd := exec.CommandContext(ctx, bin, argv...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.Bytes(), stderr.Bytes(), 0, nil
	case errors.As(err, &ee) && ee.ExitCode() > 0:
		return stdout.Bytes(), stderr.Bytes(), ee.ExitCode(), nil
	default:
		return stdout.Bytes(), stderr.Bytes(), -1, fmt.Errorf("running %s: %w", bin, err)
	}
}

// Options configures one OrbStack jail.
type Options struct {
	// Machine is the machine name, lever-<name>.
	Machine string
	// Tree is the absolute host path of the project tree, mounted at /lever.
	Tree string
	// Image is the distro[:version] to create from; default DefaultImage.
	Image string
	// RunUser is the machine's unprivileged user; default DefaultRunUser.
	RunUser string
	// Exec runs orb; default HostExec{}.
	Exec Exec
	// StateDir is the instance's host state directory: the ssh control socket and the
	// record of socket forwards live there (ForwardSocket).
	StateDir string
	// SSH is the ssh binary ForwardSocket drives; default "ssh" on PATH.
	SSH string
	// SSHConfig is OrbStack's generated ssh config; default ~/.orbstack/ssh/config.
	SSHConfig string
	// Arch is the architecture a new machine is created with (orb create --arch), in GOARCH
	// spelling; default the host's. lever names it rather than leaving it to orb so that
	// the guest helper it chooses before the machine exists (GuestArch) is the one the
	// machine will run.
	Arch string
}

// Backend is one OrbStack isolated machine.
type Backend struct {
	o Options
	// traced is the Runner, made once (so a trace numbers every call of the run).
	traceOnce sync.Once
	traced    guest.Runner
}

// New checks the options and fills defaults; it touches nothing.
func New(o Options) (*Backend, error) {
	if o.Machine == "" {
		return nil, errors.New("orbstack backend: machine name is empty")
	}
	// An empty tree is allowed so that stop and destroy work after the tree has gone;
	// creating a machine then refuses (EnsureUp).
	if o.Tree != "" && !strings.HasPrefix(o.Tree, "/") {
		return nil, fmt.Errorf("orbstack backend: tree %q is not an absolute host path", o.Tree)
	}
	// orb's --mount takes host:guest; a ':' in the host path would be read as the split.
	if strings.Contains(o.Tree, ":") {
		return nil, fmt.Errorf("orbstack backend: tree %q contains ':', which orb create --mount cannot express", o.Tree)
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.RunUser == "" {
		o.RunUser = DefaultRunUser
	}
	if o.Exec == nil {
		o.Exec = HostExec{}
	}
	if o.SSH == "" {
		o.SSH = "ssh"
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.Arch != "amd64" && o.Arch != "arm64" {
		return nil, fmt.Errorf("orbstack backend: architecture %q: OrbStack machines are arm64 or amd64", o.Arch)
	}
	return &Backend{o: o}, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "orbstack" }

// HostAlias implements backend.Backend. The name is resolved inside the machine (getent,
// through the Runner), never on the Mac.
func (b *Backend) HostAlias() string { return AliasName }

// Profile implements backend.Backend.
func (b *Backend) Profile() backend.Profile { return profile }

// Machine is the machine's name.
func (b *Backend) Machine() string { return b.o.Machine }

// orb runs one orb command and turns a non-zero exit into an error carrying stderr.
func (b *Backend) orb(ctx context.Context, argv ...string) ([]byte, error) {
	stdout, stderr, code, err := b.o.Exec.Run(ctx, argv, nil)
	if err != nil {
		return nil, fmt.Errorf("orb %s: %w", strings.Join(argv, " "), err)
	}
	if code != 0 {
		return nil, fmt.Errorf("orb %s: exit %d: %s", strings.Join(argv, " "), code, strings.TrimSpace(string(stderr)))
	}
	return stdout, nil
}

// machineRecord is the part of `orb list --format json` lever reads.
type machineRecord struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Image struct {
		Arch string `json:"arch"`
	} `json:"image"`
	Config *struct {
		Isolated *bool `json:"isolated"`
	} `json:"config"`
}

// lookup finds the machine in `orb list --format json`; nil when it does not exist.
func (b *Backend) lookup(ctx context.Context) (*machineRecord, error) {
	out, err := b.orb(ctx, "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var recs []machineRecord
	if err := json.Unmarshal(out, &recs); err != nil {
		return nil, fmt.Errorf("orb list --format json: unexpected output: %w", err)
	}
	for i := range recs {
		if recs[i].Name == b.o.Machine {
			return &recs[i], nil
		}
	}
	return nil, nil
}

// CreateArgv is the exact `orb create` lever runs: an isolated machine whose only host
// mount is the tree at /lever. It is exported so docs and tests show the one place the
// jail's filesystem bound is decided.
func (b *Backend) CreateArgv() []string {
	return []string{"create", "--arch", b.o.Arch, "--isolated", "--mount", b.o.Tree + ":" + MountPoint, b.o.Image, b.o.Machine}
}

// EnsureUp implements backend.Backend: create the machine if it does not exist (orb
// create also starts it), start it if it is stopped, leave it if it runs. An existing
// machine is adopted only if orb reports it isolated: a normal machine sees the whole Mac
// under /mnt/mac and would void the filesystem bound.
func (b *Backend) EnsureUp(ctx context.Context) error {
	rec, err := b.lookup(ctx)
	if err != nil {
		return err
	}
	if rec == nil {
		if b.o.Tree == "" {
			return fmt.Errorf("creating isolated machine %s: no tree to mount", b.o.Machine)
		}
		if _, err := b.orb(ctx, b.CreateArgv()...); err != nil {
			return fmt.Errorf("creating isolated machine %s: %w", b.o.Machine, err)
		}
		return b.bootstrap(ctx)
	}
	if err := isolated(b.o.Machine, rec); err != nil {
		return err
	}
	switch rec.State {
	case "running":
		return nil
	case "stopped":
		if _, err := b.orb(ctx, "start", b.o.Machine); err != nil {
			return fmt.Errorf("starting machine %s: %w", b.o.Machine, err)
		}
		// A machine whose first up stopped between create and bootstrap gets it now.
		return b.bootstrap(ctx)
	default:
		return fmt.Errorf("machine %s is %s; wait for it to settle and run again", b.o.Machine, rec.State)
	}
}

// Stop implements backend.Backend: ends lever's ssh master (and with it the podman socket
// forward), then powers the machine off, keeping its disk. A machine that does not exist
// or is already stopped is left alone.
func (b *Backend) Stop(ctx context.Context) error {
	if err := b.cancelForwards(ctx); err != nil {
		return err
	}
	rec, err := b.lookup(ctx)
	if err != nil || rec == nil || rec.State == "stopped" {
		return err
	}
	if _, err := b.orb(ctx, "stop", b.o.Machine); err != nil {
		return fmt.Errorf("stopping machine %s: %w", b.o.Machine, err)
	}
	return nil
}

// Destroy implements backend.Backend: ends lever's ssh master, then deletes the machine
// and its disk. OrbStack keeps nothing else on the host for it; lever's own host state
// (the state dir) is removed by the caller.
func (b *Backend) Destroy(ctx context.Context) error {
	if err := b.cancelForwards(ctx); err != nil {
		return err
	}
	rec, err := b.lookup(ctx)
	if err != nil || rec == nil {
		return err
	}
	if _, err := b.orb(ctx, "delete", "--force", b.o.Machine); err != nil {
		return fmt.Errorf("deleting machine %s: %w", b.o.Machine, err)
	}
	return nil
}

// Runner implements backend.Backend.
func (b *Backend) Runner() guest.Runner {
	b.traceOnce.Do(func() {
		b.traced = guest.TraceFromEnv(&Runner{Machine: b.o.Machine, RunUser: b.o.RunUser, Exec: b.o.Exec})
	})
	return b.traced
}

// Runner runs guest commands with `orb -u <user> -m <machine> -w / argv...`: as root with
// -u root (no sudo, no run user in between), as the run user with -u <run user>. -w /
// because orb otherwise starts in the Mac's current directory, which an isolated machine
// does not have.
type Runner struct {
	Machine string
	RunUser string
	Exec    Exec
}

// Argv is the orb command line for c.
func (r *Runner) Argv(c guest.Cmd) []string {
	user := "root"
	if c.As == guest.RunUser {
		user = r.RunUser
	}
	return append([]string{"-u", user, "-m", r.Machine, "-w", "/"}, c.Argv...)
}

// Run implements guest.Runner.
func (r *Runner) Run(ctx context.Context, c guest.Cmd) (guest.Result, error) {
	if len(c.Argv) == 0 {
		return guest.Result{}, errors.New("orbstack runner: empty command")
	}
	// orb parses its own flags before the command; a command starting with '-' would be
	// taken as one of them.
	if strings.HasPrefix(c.Argv[0], "-") {
		return guest.Result{}, fmt.Errorf("orbstack runner: command %q starts with '-'", c.Argv[0])
	}
	stdout, stderr, code, err := r.Exec.Run(ctx, r.Argv(c), c.Stdin)
	if err != nil {
		return guest.Result{}, fmt.Errorf("orbstack runner: %w", err)
	}
	return guest.Result{Stdout: stdout, Stderr: stderr, ExitCode: code}, nil
}
