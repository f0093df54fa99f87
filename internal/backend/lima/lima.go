// Package lima is the Lima backend: a qemu VM per instance, created from lever's
// containment template (templates/lima.yaml.tmpl) with limactl, the tree as its only
// mount, no port forwards and no containerd, checked against the VM's realized config
// before it is trusted.
//
// limactl refuses to run as root, so lever's Lima backend runs as the unprivileged user
// who owns the VM (lever itself is meant to run as that user); as root it refuses with a
// message saying so, rather than switching identity behind the operator's back.
//
// It owns the VM (template, limactl, its ssh forwards, the realized-config check); it must
// not reach into the guest except through its guest.Runner, nor re-derive lever.yaml's
// defaults (the config does that).
package lima

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/templates"
)

func init() {
	backend.Register(backend.Descriptor{
		Profile: profile,
		Probe:   Probe,
		New:     func(cfg *config.Config) (backend.Backend, error) { return New(cfg) },
	})
}

var profile = backend.Profile{
	Name:               "lima",
	HypervisorBoundary: true,
	Kernel:             "separate from host (one guest kernel shared by manager and workers)",
	FilesystemBound:    "one mount of the tree at /lever (reverse-sshfs; virtiofs under vz on macOS >= 13), checked against the realized config and the live guest mount",
	EgressEnforced:     "iptables LEVER_EGRESS in the VM's init network namespace",
	RootlessRuntime:    "rootless podman as the guest run user",
	Caveats: []string{
		"root in the guest is reachable from the run user (passwordless sudo, which lever's own root commands use)",
		"a global ~/.lima/_config/{default,override}.yaml is merged into the VM; the drift check refuses any mount, port forward or containerd setting it adds",
		"nested_virt exposes the host's nested SVM/VMX emulation to the guest; only the manager gets /dev/kvm",
		"the VM survives lever stop and host reboots; only lever destroy discards it",
		"limactl refuses root: run lever as the unprivileged user that owns the VM",
	},
}

// Lima is the backend for one instance.
type Lima struct {
	cfg    *config.Config
	vm     string
	home   string // LIMA_HOME
	lc     *limactl
	runner guest.Runner
	facts  Facts
	plat   Platform // VM type, architecture and mount type for this host
	accel  Accel    // the accelerator lima.accel resolves to here
	// accelErr is lima.accel: kvm that cannot work; EnsureUp returns it before limactl runs
	// (stop and destroy still work).
	accelErr error
}

var _ backend.Backend = (*Lima)(nil)

// New builds the backend for cfg. It touches nothing.
func New(cfg *config.Config) (*Lima, error) {
	bin := cfg.Lima.Limactl
	if bin == "" {
		bin = "limactl"
	}
	home, err := limaHome()
	if err != nil {
		return nil, err
	}
	vm := cfg.MachineName()
	plat, err := PlatformFor(CurrentHost())
	if err != nil {
		return nil, err
	}
	l := &Lima{cfg: cfg, vm: vm, home: home, lc: &limactl{bin: bin}, plat: plat}
	l.accel, l.accelErr = hostAccel(cfg.Lima.Accel)
	var unusable *kvmUnusableError
	if l.accelErr != nil && !errors.As(l.accelErr, &unusable) {
		return nil, l.accelErr
	}
	if l.accel.Name == "tcg" {
		// Lima v1.x runs qemu with accel=kvm on Linux whatever /dev/kvm allows; the wrapper
		// rewrites it, for the guest architecture's qemu.
		l.lc.env = append(l.lc.env, qemuEnvVar(plat.Arch)+"="+l.qemuWrapper())
		if os.Getenv("LEVER_QEMU_SYSTEM") == "" {
			// The real qemu, resolved now (the wrapper would otherwise look for the x86_64 one).
			real := plat.QemuBinary
			if p, err := exec.LookPath(real); err == nil {
				real = p
			}
			l.lc.env = append(l.lc.env, "LEVER_QEMU_SYSTEM="+real)
		}
	}
	l.runner = guest.TraceFromEnv(&sshRunner{instDir: filepath.Join(home, vm), vm: vm})
	return l, nil
}

// limaHome is where limactl keeps instances: $LIMA_HOME, else ~/.lima (Lima's own rule).
func limaHome() (string, error) {
	if h := os.Getenv("LIMA_HOME"); h != "" {
		return h, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("lima: finding the home directory for ~/.lima: %w", err)
	}
	return filepath.Join(home, ".lima"), nil
}

func (l *Lima) Name() string             { return "lima" }
func (l *Lima) HostAlias() string        { return HostAlias }
func (l *Lima) Profile() backend.Profile { return profile }
func (l *Lima) Runner() guest.Runner     { return l.runner }

// GuestArch is the architecture lever renders into the VM's template, which the VM is
// created from, in GOARCH spelling. (Were a VM of another architecture in its place, the
// helper would fail to start and the workbench build refuses a lev that does not match the
// guest's dpkg architecture: a failure, never a wrong binary run.)
func (l *Lima) GuestArch(context.Context) (string, error) { return l.plat.GOARCH() }

var _ backend.ArchReporter = (*Lima)(nil)

// Facts is what the last EnsureUp read in the guest: the host alias address and the
// resolver's DNAT targets (for the open posture's egress rules), the mount, /dev/kvm.
func (l *Lima) Facts() Facts { return l.facts }

// ManagerDevices are the device nodes the manager container (only) is given: /dev/kvm
// under nested_virt, nothing otherwise. Workers never get any.
func (l *Lima) ManagerDevices() []string {
	if l.cfg.NestedVirt {
		return []string{"/dev/kvm"}
	}
	return nil
}

func (l *Lima) stateDir() string    { return filepath.Join(l.cfg.StateDir(), "lima") }
func (l *Lima) qemuWrapper() string { return filepath.Join(l.stateDir(), "qemu-tcg.sh") }

// hostAccel is HostAccel; the tests pin it so what reaches limactl does not depend
// on this machine's /dev/kvm.
var hostAccel = HostAccel

// accelWarn prints auto's one-line TCG warning (stderr; the tests capture it).
var accelWarn = func(line string) { fmt.Fprintln(os.Stderr, line) }

// Accel is the accelerator this instance's VM runs under, and why.
func (l *Lima) Accel() Accel { return l.accel }

// geteuid is os.Geteuid; the replay tests (which run as root to own their fixtures) stand
// in for the unprivileged user limactl needs.
var geteuid = os.Geteuid

// refuseRoot: limactl exits when run as root; say why before it does.
func refuseRoot() error {
	if geteuid() == 0 {
		return errors.New("lima backend: limactl refuses to run as root; run lever as the unprivileged user that owns the VM")
	}
	return nil
}

// EnsureUp creates the VM from the template if it does not exist, checks the realized
// config for drift (before the first boot on a fresh VM, and on every adopted one), starts
// it if stopped, and checks the guest in one round-trip: the tree mounted at /lever, the
// userns sysctl, the host alias and the resolver's DNAT targets.
func (l *Lima) EnsureUp(ctx context.Context) error {
	_, err := l.ensureUp(ctx, nil)
	return err
}

// EnsureUpWithSnapshot is EnsureUp whose one guest call after the boot is the egress
// snapshot req asks for (bringup.UpSnapshotter): that snapshot already reads everything
// the facts call would (this backend's containment part, the alias with getent ahostsv4,
// LIMADNS), so the facts are read from its sections and the snapshot's are returned for
// the egress step. A cold bring-up then plans its rebuild without a round trip of its own
// (~0.5 s of ssh and sudo under TCG, and the same lookups run twice). A req that does not
// read all of that (another alias, no LIMADNS, not this containment part) gets the facts
// call of its own and nil sections.
func (l *Lima) EnsureUpWithSnapshot(ctx context.Context, req guest.SnapshotRequest) (guest.Sections, error) {
	return l.ensureUp(ctx, &req)
}

func (l *Lima) ensureUp(ctx context.Context, req *guest.SnapshotRequest) (guest.Sections, error) {
	if err := refuseRoot(); err != nil {
		return nil, err
	}
	// lima.accel: kvm that cannot work fails here, before limactl or qemu runs.
	if l.accelErr != nil {
		return nil, l.accelErr
	}
	if l.accel.Warning != "" {
		accelWarn(l.accel.Warning)
	}
	out, err := l.lc.run(ctx, "--version")
	if err != nil {
		return nil, err
	}
	if _, err := CheckVersion(string(out)); err != nil {
		return nil, err
	}
	intent, rendered, err := l.intent()
	if err != nil {
		return nil, err
	}
	if err := l.writeHostFiles(rendered); err != nil {
		return nil, err
	}
	inst, err := l.list(ctx)
	if err != nil {
		return nil, err
	}
	if inst == nil {
		if _, err := l.lc.run(ctx, "create", "--tty=false", "--name="+l.vm, filepath.Join(l.stateDir(), "lima.yaml")); err != nil {
			return nil, err
		}
		if inst, err = l.list(ctx); err != nil {
			return nil, err
		}
		if inst == nil {
			return nil, fmt.Errorf("lima: %s not listed after limactl create", l.vm)
		}
	}
	if d := Drift(intent, inst.Config); len(d) > 0 {
		return nil, &DriftError{VM: l.vm, Differences: d}
	}
	if inst.Status != "Running" {
		if _, err := l.lc.run(ctx, "start", "--tty=false", "--timeout=15m", l.vm); err != nil {
			return nil, err
		}
	}
	var f Facts
	var secs guest.Sections
	if req != nil && carriesFacts(*req) {
		secs, f, err = gatherWithSnapshot(ctx, l.runner, *req)
	} else {
		f, err = GatherFacts(ctx, l.runner)
	}
	if err != nil {
		return nil, err
	}
	if err := CheckFacts(f, l.plat.GuestFSType, l.cfg.NestedVirt); err != nil {
		return nil, fmt.Errorf("lima VM %s: %w", l.vm, err)
	}
	l.facts = f
	return secs, nil
}

func (l *Lima) writeHostFiles(rendered []byte) error {
	if err := os.MkdirAll(l.stateDir(), 0o700); err != nil {
		return fmt.Errorf("lima state dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(l.stateDir(), "lima.yaml"), rendered, 0o600); err != nil {
		return fmt.Errorf("writing the lima template: %w", err)
	}
	if l.accel.Name == "tcg" {
		if err := os.WriteFile(l.qemuWrapper(), []byte(templates.QemuTCG), 0o700); err != nil {
			return fmt.Errorf("writing the qemu TCG wrapper: %w", err)
		}
	}
	return nil
}

// list returns the VM's `limactl list --json` entry, or nil when it does not exist.
func (l *Lima) list(ctx context.Context) (*Instance, error) {
	out, err := l.lc.run(ctx, "list", "--json")
	if err != nil {
		return nil, err
	}
	return ParseList(out, l.vm)
}

// Stop powers the VM off and keeps its disk. Stopping a stopped or absent VM is a no-op.
func (l *Lima) Stop(ctx context.Context) error {
	if err := refuseRoot(); err != nil {
		return err
	}
	inst, err := l.list(ctx)
	if err != nil {
		return err
	}
	// The forwards die with the master; cancel them first so no socket file outlives it.
	ferr := l.cancelForwards(ctx)
	if inst == nil || inst.Status == "Stopped" {
		return ferr
	}
	if _, err = l.lc.run(ctx, "stop", l.vm); err != nil {
		return err
	}
	return ferr
}

// Destroy deletes the VM (limactl delete --force) and lever's host files for it.
func (l *Lima) Destroy(ctx context.Context) error {
	if err := refuseRoot(); err != nil {
		return err
	}
	inst, err := l.list(ctx)
	if err != nil {
		return err
	}
	if inst != nil {
		_ = l.cancelForwards(ctx)
		if _, err := l.lc.run(ctx, "delete", "--force", l.vm); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(l.stateDir()); err != nil {
		return fmt.Errorf("removing %s: %w", l.stateDir(), err)
	}
	return nil
}

// Probe says whether the Lima backend can run here: limactl found, an accepted version,
// qemu present, and not running as root.
func Probe(ctx context.Context) backend.Availability {
	a := backend.Availability{}
	// What lima.accel: auto would use here (lever.yaml may say otherwise), probed as this
	// user: the one that would own the VM. Shown whether or not limactl is installed.
	if acc, err := HostAccel("auto"); err == nil {
		a.Accelerator, a.AcceleratorWhy = acc.Name, acc.Why
	}
	bin, err := exec.LookPath("limactl")
	if err != nil {
		a.Reason = "limactl not found on PATH (scripts/lima/build-limactl.sh builds v1.2.2)"
		return a
	}
	a.Tool = bin
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		a.Reason = fmt.Sprintf("limactl --version: %v", err)
		return a
	}
	v, err := CheckVersion(string(out))
	a.Version = v
	if err != nil {
		a.Reason = err.Error()
		return a
	}
	plat, err := PlatformFor(CurrentHost())
	if err != nil {
		a.Reason = err.Error()
		return a
	}
	if plat.QemuBinary != "" {
		if _, err := exec.LookPath(plat.QemuBinary); err != nil {
			a.Reason = plat.QemuBinary + " not found on PATH"
			return a
		}
	}
	if os.Geteuid() == 0 {
		a.Reason = "running as root: limactl refuses root, run lever as an unprivileged user"
		return a
	}
	a.Usable = true
	return a
}
