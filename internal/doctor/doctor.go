// Package doctor is `lever doctor`: the host prerequisites in one report, each check with
// its fix. The checks are pure: they read the host only through a Probe (host.go is the
// real one; the tests give fakes), so every verdict and message is decided here and
// table-tested. A blocker is a check that stops lever up (or a jail) from working; a
// warning is a degradation (a slow VM, a skipped lint) or a leftover worth clearing.
package doctor

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Schema is the version of the --json report; a field's meaning never changes within one.
const Schema = 1

// Status is a check's verdict.
type Status string

const (
	OK      Status = "ok"
	Warn    Status = "warn"
	Blocker Status = "blocker"
)

// Check is one line of the report: what was checked (ID), the verdict, what was found,
// and, unless ok, the fix.
type Check struct {
	ID     string `json:"id"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Report is the whole run; Blockers > 0 makes lever doctor exit 1.
type Report struct {
	Schema   int     `json:"schema"`
	Checks   []Check `json:"checks"`
	Blockers int     `json:"blockers"`
	Warnings int     `json:"warnings"`
}

// Thresholds of the disk check: the guest image, a VM disk and container storage take a
// few GiB; below MinFreeBytes a bring-up fails part-way.
const (
	MinFreeBytes  = 2 << 30
	WarnFreeBytes = 10 << 30
	// CAWarnBefore: a CA this close to its end is renewed only by a new jail.
	CAWarnBefore = 30 * 24 * time.Hour
)

// Backend is one registered backend as its own probe saw it.
type Backend struct {
	Name        string
	Usable      bool
	Tool        string
	Version     string
	Reason      string
	Accelerator string
	AccelWhy    string
}

// Tool is a host binary: Path "" when not on PATH; Version its first line of --version.
type Tool struct {
	Path, Version string
}

// KVM is /dev/kvm as the user running lever (the VM's owner: lever starts the VM as that
// user) finds it.
type KVM struct {
	Present bool
	// OpenErr is why a read-write open failed ("" when it succeeded).
	OpenErr string
	User    string
}

// Config is the jail lever doctor was pointed at: Found false when there is no
// lever.yaml (the jail's checks are skipped), Err when it could not be loaded.
type Config struct {
	Path    string
	Found   bool
	Err     string
	Name    string
	Backend string
	// StateDir holds the broker's CA and state.
	StateDir string
}

// Cert is a certificate's validity: Missing when not made yet, Err when unreadable.
type Cert struct {
	Path     string
	Missing  bool
	Err      string
	NotAfter time.Time
}

// Broker is the jail's broker: Running, and its server certificate's end when it runs.
type Broker struct {
	Running      bool
	CertNotAfter time.Time
	Err          string
}

// Jail is the running jail's state, from the same observation as lever status.
type Jail struct {
	// Err: the jail could not be observed at all (its bring-up instance could not be made).
	Err         string
	Reachable   bool
	Verified    bool
	Differences []string
	EgressErr   string
	Healthy     bool
}

// Namespace is a network namespace named like lever's; Procs is how many processes are
// inside (-1: could not tell, which needs root).
type Namespace struct {
	Name  string
	Procs int
}

// Process is a leftover process: an exec session's conmon waiting out podman's exit
// delay after its command ended.
type Process struct {
	PID  int
	User string
	What string
}

// Probe is everything the checks read of the host.
type Probe interface {
	Host() (goos, goarch string)
	Backends(ctx context.Context) []Backend
	Tool(ctx context.Context, name string) Tool
	KVM() KVM
	// FreeBytes is the space available to the user on the file system holding path.
	FreeBytes(path string) (uint64, error)
	Config() Config
	CA(stateDir string) Cert
	Broker(stateDir string) Broker
	// Jail is nil when there is no jail to observe (no config).
	Jail(ctx context.Context) *Jail
	Namespaces() ([]Namespace, error)
	Leftovers() ([]Process, error)
	Now() time.Time
}

// Run performs every check.
func Run(ctx context.Context, p Probe) Report {
	goos, goarch := p.Host()
	cfg := p.Config()
	var cs []Check
	cs = append(cs, configCheck(cfg))
	cs = append(cs, backendChecks(p.Backends(ctx), cfg)...)
	if goos == "linux" {
		cs = append(cs, kvmCheck(p.KVM(), cfg))
		cs = append(cs, qemuCheck(p.Tool(ctx, qemuFor(goarch)), qemuFor(goarch), cfg))
		cs = append(cs, podmanCheck(p.Tool(ctx, "podman"), cfg))
	}
	cs = append(cs, shellcheckCheck(p.Tool(ctx, "shellcheck")))
	diskAt := cfg.StateDir
	if diskAt == "" {
		diskAt = "."
	}
	free, err := p.FreeBytes(diskAt)
	cs = append(cs, diskCheck(diskAt, free, err))
	if cfg.Found && cfg.Err == "" {
		now := p.Now()
		cs = append(cs, caCheck(p.CA(cfg.StateDir), now))
		cs = append(cs, brokerCheck(p.Broker(cfg.StateDir), now))
		cs = append(cs, jailCheck(p.Jail(ctx), cfg))
	}
	if goos == "linux" {
		ns, err := p.Namespaces()
		cs = append(cs, namespaceCheck(ns, err))
		ps, err := p.Leftovers()
		cs = append(cs, leftoverCheck(ps, err))
	}
	r := Report{Schema: Schema, Checks: cs}
	for _, c := range cs {
		switch c.Status {
		case Blocker:
			r.Blockers++
		case Warn:
			r.Warnings++
		}
	}
	return r
}

func qemuFor(goarch string) string {
	switch goarch {
	case "arm64":
		return "qemu-system-aarch64"
	default:
		return "qemu-system-x86_64"
	}
}

func configCheck(c Config) Check {
	switch {
	case !c.Found:
		return Check{ID: "config", Status: OK, Detail: fmt.Sprintf("no %s here or in a directory above: the jail's checks (broker certificates, drift) are skipped", c.Path)}
	case c.Err != "":
		return Check{ID: "config", Status: Blocker, Detail: c.Err, Fix: "correct " + c.Path + " (docs/config.md); lever up refuses it as it is"}
	}
	return Check{ID: "config", Status: OK, Detail: fmt.Sprintf("%s: jail %s on backend %s", c.Path, c.Name, c.Backend)}
}

// backendFix is how to make each backend usable.
var backendFix = map[string]string{
	"lima":     "install Lima so that limactl is on PATH (scripts/lima/build-limactl.sh builds the version lever is tested with; on Linux QEMU as well)",
	"orbstack": "install OrbStack (macOS only) and start it, so that orb is on PATH",
	"netns":    "netns is the development substrate, with no hypervisor boundary: as root on Linux, with podman, uidmap and iptables installed, set LEVER_DEV_NETNS=1",
}

func backendChecks(bs []Backend, cfg Config) []Check {
	sort.Slice(bs, func(i, j int) bool { return bs[i].Name < bs[j].Name })
	var cs []Check
	usable := 0
	for _, b := range bs {
		c := Check{ID: "backend " + b.Name}
		var facts []string
		if b.Tool != "" {
			facts = append(facts, b.Tool)
		}
		if b.Version != "" {
			facts = append(facts, "version "+b.Version)
		}
		if b.Accelerator != "" {
			facts = append(facts, "accelerator "+b.Accelerator)
		}
		what := strings.Join(facts, ", ")
		selected := cfg.Found && cfg.Err == "" && cfg.Backend == b.Name
		switch {
		case b.Usable:
			usable++
			c.Status, c.Detail = OK, "usable"
			if what != "" {
				c.Detail += " (" + what + ")"
			}
		case selected:
			c.Status, c.Detail, c.Fix = Blocker, "not usable, and "+cfg.Path+" names it: "+b.Reason, backendFix[b.Name]
		default:
			c.Status, c.Detail, c.Fix = Warn, "not usable: "+b.Reason, backendFix[b.Name]
		}
		if selected && b.Usable {
			c.Detail += "; " + cfg.Path + " names it"
		}
		cs = append(cs, c)
	}
	if usable == 0 {
		cs = append(cs, Check{ID: "backends", Status: Blocker, Detail: "no backend is usable on this host", Fix: "install one of them (see the backend lines above; lever backends compares them)"})
	}
	return cs
}

func kvmCheck(k KVM, cfg Config) Check {
	c := Check{ID: "kvm"}
	switch {
	case !k.Present:
		c.Status, c.Detail = Warn, "/dev/kvm does not exist: a Lima VM runs under TCG emulation, about ten times slower"
		c.Fix = "enable virtualisation (VT-x/AMD-V, or nested virtualisation for a VM host) and load kvm_intel or kvm_amd"
	case k.OpenErr != "":
		c.Status, c.Detail = Warn, fmt.Sprintf("%s cannot open /dev/kvm (%s): a Lima VM it starts runs under TCG emulation, about ten times slower", k.User, k.OpenErr)
		c.Fix = fmt.Sprintf("sudo usermod -aG kvm %s, then log in again", k.User)
	default:
		c.Status, c.Detail = OK, fmt.Sprintf("%s can open /dev/kvm read-write", k.User)
	}
	if c.Status != OK && cfg.Backend != "lima" {
		c.Detail += " (only the lima backend needs it)"
	}
	return c
}

func qemuCheck(t Tool, name string, cfg Config) Check {
	if t.Path != "" {
		return Check{ID: "qemu", Status: OK, Detail: name + " " + t.Version}
	}
	c := Check{ID: "qemu", Status: Warn, Detail: name + " is not on PATH: Lima cannot start a VM on Linux without it", Fix: "apt-get install qemu-system-x86 qemu-utils (qemu-system-arm on arm64)"}
	if cfg.Found && cfg.Err == "" && cfg.Backend == "lima" {
		c.Status = Blocker
	}
	return c
}

func podmanCheck(t Tool, cfg Config) Check {
	if t.Path != "" {
		return Check{ID: "podman", Status: OK, Detail: t.Version}
	}
	c := Check{ID: "podman", Status: Warn, Detail: "podman is not on PATH: the netns backend runs the jail's containers with the host's podman", Fix: "apt-get install podman uidmap"}
	if cfg.Found && cfg.Err == "" && cfg.Backend == "netns" {
		c.Status = Blocker
	}
	return c
}

func shellcheckCheck(t Tool) Check {
	if t.Path != "" {
		return Check{ID: "shellcheck", Status: OK, Detail: t.Version}
	}
	return Check{ID: "shellcheck", Status: Warn,
		Detail: "shellcheck is not on PATH: make lint skips the shell scripts (with a warning; under CI=true it fails)",
		Fix:    "apt-get install shellcheck (only for developing lever: make lint)"}
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

func diskCheck(path string, free uint64, err error) Check {
	c := Check{ID: "disk"}
	switch {
	case err != nil:
		c.Status, c.Detail, c.Fix = Warn, fmt.Sprintf("cannot read the free space at %s: %v", path, err), "check that "+path+" exists and is readable"
	case free < MinFreeBytes:
		c.Status, c.Detail, c.Fix = Blocker, fmt.Sprintf("%s free at %s, below the %s a bring-up needs", gib(free), path, gib(MinFreeBytes)), "free space on that file system (lever destroy removes an unused jail's VM and images)"
	case free < WarnFreeBytes:
		c.Status, c.Detail, c.Fix = Warn, fmt.Sprintf("%s free at %s: a VM disk and the images may not fit (%s recommended)", gib(free), path, gib(WarnFreeBytes)), "free space on that file system"
	default:
		c.Status, c.Detail = OK, fmt.Sprintf("%s free at %s", gib(free), path)
	}
	return c
}

func caCheck(c Cert, now time.Time) Check {
	ch := Check{ID: "broker ca"}
	switch {
	case c.Missing:
		ch.Status, ch.Detail = OK, "not made yet (lever up makes it)"
	case c.Err != "":
		ch.Status, ch.Detail, ch.Fix = Blocker, c.Err, "restore "+c.Path+" and its key from a backup, or lever destroy and lever up for a new CA (every agent enrols again)"
	case !now.Before(c.NotAfter):
		ch.Status, ch.Detail, ch.Fix = Blocker, fmt.Sprintf("%s expired %s", c.Path, c.NotAfter.UTC().Format(time.RFC3339)), "lever destroy and lever up: a new jail gets a new CA (every agent enrols again)"
	case c.NotAfter.Sub(now) < CAWarnBefore:
		ch.Status, ch.Detail, ch.Fix = Warn, fmt.Sprintf("%s expires %s", c.Path, c.NotAfter.UTC().Format(time.RFC3339)), "plan a lever destroy and lever up before then (a new CA)"
	default:
		ch.Status, ch.Detail = OK, fmt.Sprintf("%s valid until %s", c.Path, c.NotAfter.UTC().Format(time.RFC3339))
	}
	return ch
}

func brokerCheck(b Broker, now time.Time) Check {
	c := Check{ID: "broker certificate"}
	switch {
	case b.Err != "":
		c.Status, c.Detail, c.Fix = Warn, b.Err, "lever broker stop, then lever up"
	case !b.Running:
		c.Status, c.Detail = OK, "the broker is not running (lever up starts it)"
	case !now.Before(b.CertNotAfter):
		c.Status, c.Detail, c.Fix = Blocker, "the running broker's server certificate expired "+b.CertNotAfter.UTC().Format(time.RFC3339), "lever broker stop, then lever up: the broker mints a new server certificate when it starts"
	default:
		c.Status, c.Detail = OK, "the running broker's server certificate is valid until "+b.CertNotAfter.UTC().Format(time.RFC3339)
	}
	return c
}

func jailCheck(j *Jail, cfg Config) Check {
	c := Check{ID: "jail"}
	switch {
	case j != nil && j.Err != "":
		c.Status, c.Detail, c.Fix = Warn, "cannot observe jail "+cfg.Name+": "+j.Err, "what the message names (lever status and lever up stop at the same point)"
	case j == nil || !j.Reachable:
		c.Status, c.Detail = OK, "jail "+cfg.Name+" is not running (lever up brings it up)"
	case j.EgressErr != "":
		c.Status, c.Detail, c.Fix = Warn, "jail "+cfg.Name+" runs but its firewall could not be read: "+j.EgressErr, "lever status, then lever up"
	case !j.Verified:
		c.Status, c.Detail, c.Fix = Blocker, "jail "+cfg.Name+"'s firewall DRIFTED from lever.yaml: "+strings.Join(j.Differences, "; "), "lever up (rebuilds the firewall before anything else starts)"
	case !j.Healthy:
		c.Status, c.Detail, c.Fix = Warn, "jail "+cfg.Name+" runs with its firewall verified, but is not healthy", "lever status shows what is down; lever up repairs it"
	default:
		c.Status, c.Detail = OK, "jail "+cfg.Name+" runs, firewall verified rule for rule"
	}
	return c
}

func namespaceCheck(ns []Namespace, err error) Check {
	c := Check{ID: "leftover namespaces"}
	if err != nil {
		c.Status, c.Detail, c.Fix = Warn, "cannot list network namespaces: "+err.Error(), "run lever doctor as root"
		return c
	}
	var empty, unknown []string
	for _, n := range ns {
		switch {
		case n.Procs == 0:
			empty = append(empty, n.Name)
		case n.Procs < 0:
			unknown = append(unknown, n.Name)
		}
	}
	switch {
	case len(empty) > 0:
		c.Status, c.Detail = Warn, "lever network namespaces with no process inside: "+strings.Join(empty, ", ")
		c.Fix = "lever destroy in that jail's project, or sudo ip netns delete NAME for each"
	case len(unknown) > 0:
		c.Status, c.Detail = OK, fmt.Sprintf("%d lever network namespaces (%s); whether they are in use needs root", len(unknown), strings.Join(unknown, ", "))
	case len(ns) == 0:
		c.Status, c.Detail = OK, "none"
	default:
		c.Status, c.Detail = OK, fmt.Sprintf("none (%d lever namespaces, each with processes inside)", len(ns))
	}
	return c
}

func leftoverCheck(ps []Process, err error) Check {
	c := Check{ID: "leftover processes"}
	if err != nil {
		c.Status, c.Detail = Warn, "cannot list processes: "+err.Error()
		return c
	}
	if len(ps) == 0 {
		c.Status, c.Detail = OK, "none"
		return c
	}
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprintf("%d (%s, %s)", p.PID, p.User, p.What))
	}
	c.Status, c.Detail = Warn, fmt.Sprintf("%d finished exec sessions' conmon processes waiting out podman's exit delay: %s", len(ps), strings.Join(s, ", "))
	c.Fix = "they exit by themselves within 300 s; for good: lever stop, then lever up (the run user's podman service reads exit_command_delay = 10 from the containers.conf lever provisions when it starts)"
	return c
}

// Text renders the report for people: one line per check, its fix under it, a summary.
func (r Report) Text() string {
	var b strings.Builder
	label := map[Status]string{OK: "ok", Warn: "WARN", Blocker: "BLOCKER"}
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "%-8s %s: %s\n", label[c.Status], c.ID, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(&b, "         fix: %s\n", c.Fix)
		}
	}
	fmt.Fprintf(&b, "lever doctor: %d %s, %d %s\n", r.Blockers, plural(r.Blockers, "blocker"), r.Warnings, plural(r.Warnings, "warning"))
	return b.String()
}

func plural(n int, w string) string {
	if n == 1 {
		return w
	}
	return w + "s"
}
