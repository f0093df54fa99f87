// Package netns is lever's development substrate: the "guest" is a Linux network
// namespace (lever-<name>) joined to the host by a veth pair whose host-side address plays
// the host alias. It runs every guest operation for real (iptables, getent, podman as the
// run user) on machines without OrbStack or a usable VM. It has NO hypervisor boundary
// and shares the host's kernel and filesystem, so it fails guarantee 0 and is accepted
// only with LEVER_DEV_NETNS=1 (config.Load refuses it otherwise). It owns the namespace
// and its veth; it must not present itself as a jail with a hypervisor boundary (its
// matrix row says it fails guarantee 0) nor touch the host's own firewall.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
)

// AliasName is the host alias inside the namespace, resolved through
// /etc/netns/<ns>/hosts (ip netns exec bind-mounts it over /etc/hosts).
const AliasName = "host.lever.internal"

// DefaultRunUser is the guest's run user; the bring-up provisions it.
const DefaultRunUser = "lever"

// PrefixEnv overrides the namespace prefix ("lever-"); tests use their own prefix so
// their namespaces never collide with a user's.
const PrefixEnv = "LEVER_NETNS_PREFIX"

// RunUserEnv overrides the run user's name ("lever"); tests running side by side on one
// host each use their own, since the run user, its podman and /run/user/<uid> are host
// state on this substrate.
const RunUserEnv = "LEVER_NETNS_RUN_USER"

var profile = backend.Profile{
	Name:               "netns",
	HypervisorBoundary: false,
	Kernel:             "shared with host",
	FilesystemBound:    "none: processes in the namespace see the whole host filesystem",
	EgressEnforced:     "iptables LEVER_EGRESS in the namespace (real iptables, both families)",
	RootlessRuntime:    "the host's rootless podman, run as the run user inside the namespace",
	Caveats: []string{
		"development substrate only: no hypervisor boundary (fails guarantee 0), accepted only with LEVER_DEV_NETNS=1",
		"the kernel is the host's: a kernel bug reached from an agent is a host compromise",
		"no filesystem bound: the project-tree-only guarantee (docs/backends.md, contract item 1) does not hold",
		"the host alias is the host side of a veth; host services must listen on that address (host loopback is not forwarded)",
		"stop removes the namespace (like a guest reboot, the firewall is gone until the next apply); there is no disk to keep",
	},
}

func init() {
	backend.Register(backend.Descriptor{
		Profile: profile,
		Probe:   Probe,
		New: func(cfg *config.Config) (backend.Backend, error) {
			return New(Options{Name: cfg.Name, Prefix: os.Getenv(PrefixEnv)})
		},
	})
}

// Probe says whether the substrate can run here: root, ip and iptables present.
func Probe(context.Context) backend.Availability {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return backend.Availability{Reason: "ip (iproute2) not on PATH"}
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return backend.Availability{Tool: ip, Reason: "iptables not on PATH"}
	}
	if os.Geteuid() != 0 {
		return backend.Availability{Tool: ip, Reason: "needs root (network namespaces, veth, iptables)"}
	}
	out, _ := exec.Command(ip, "-V").Output()
	a := backend.Availability{Usable: true, Tool: ip, Version: strings.TrimSpace(string(out))}
	if os.Getenv("LEVER_DEV_NETNS") != "1" {
		a.Usable, a.Reason = false, "development substrate: set LEVER_DEV_NETNS=1 to accept a jail without a hypervisor boundary"
	}
	return a
}

// Options configures one instance.
type Options struct {
	// Name is the instance name (lever.yaml's name).
	Name string
	// Prefix of the namespace name; default "lever-".
	Prefix string
	// HostNamespace, when set, puts the veth's host side in that (existing) namespace
	// instead of the root namespace. Tests use it so that every address they send traffic
	// to is in a namespace they made.
	HostNamespace string
	// RunUser is the guest's unprivileged user; default "lever".
	RunUser string
	// ClaimDir replaces ClaimDir (unit tests).
	ClaimDir string
}

// Backend is one netns jail.
type Backend struct {
	opts      Options
	ns        string
	hostVeth  string
	guestVeth string
	hostV4    netip.Prefix
	guestV4   netip.Prefix
	hostV6    netip.Prefix
	guestV6   netip.Prefix
	runner    *Runner
	traced    guest.Runner // runner, or runner traced (guest.TraceEnv)
}

// New derives the namespace, veth names and addresses from the name. Addresses are a /30
// in 10.233.0.0/16 and a /64 in fd6c:6576:6572::/48, chosen by a hash of the namespace
// name, so each instance always gets the same ones; EnsureUp refuses an address another
// interface already holds.
func New(o Options) (*Backend, error) {
	if o.Name == "" {
		return nil, errors.New("netns backend: instance name is empty")
	}
	if o.Prefix == "" {
		o.Prefix = "lever-"
	}
	if o.RunUser == "" {
		o.RunUser = os.Getenv(RunUserEnv)
	}
	if o.RunUser == "" {
		o.RunUser = DefaultRunUser
	}
	if err := checkRunUserName(o.RunUser); err != nil {
		return nil, err
	}
	ns := o.Prefix + o.Name
	if len(ns) > 64 || strings.ContainsAny(ns, "/ \t\n") {
		return nil, fmt.Errorf("netns backend: namespace name %q is not usable", ns)
	}
	h := fnv.New32a()
	h.Write([]byte(ns))
	sum := h.Sum32()
	idx := sum % 16384 // /30s in a /16
	base := 4 * idx
	b3, b4 := byte(base>>8), byte(base&0xff)
	tag := fmt.Sprintf("%08x", sum)
	b := &Backend{
		opts:      o,
		ns:        ns,
		hostVeth:  "lv" + tag + "h",
		guestVeth: "lv" + tag + "g",
		hostV4:    netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 233, b3, b4 + 1}), 30),
		guestV4:   netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 233, b3, b4 + 2}), 30),
		hostV6:    netip.MustParsePrefix(fmt.Sprintf("fd6c:6576:6572:%x::1/64", idx)),
		guestV6:   netip.MustParsePrefix(fmt.Sprintf("fd6c:6576:6572:%x::2/64", idx)),
	}
	b.runner = &Runner{Namespace: ns, RunUser: o.RunUser}
	b.traced = guest.TraceFromEnv(b.runner)
	return b, nil
}

// Name implements backend.Backend.
func (b *Backend) Name() string { return "netns" }

// GuestArch is the host's architecture: the netns "guest" is the host's own kernel.
func (b *Backend) GuestArch(context.Context) (string, error) { return runtime.GOARCH, nil }

var _ backend.ArchReporter = (*Backend)(nil)

// Namespace is the guest's network namespace name.
func (b *Backend) Namespace() string { return b.ns }

// RunUser is the guest's run user (bringup.RunUserNamer).
func (b *Backend) RunUser() string { return b.runner.RunUser }

// SharesHostFilesystem says the guest is the host outside its network namespace
// (bringup.HostSharer): its tree is the host path, its users the host's users.
func (b *Backend) SharesHostFilesystem() bool { return true }

// HostAddrs are the alias's addresses (the veth's host side).
func (b *Backend) HostAddrs() (netip.Addr, netip.Addr) { return b.hostV4.Addr(), b.hostV6.Addr() }

// GuestAddrs are the namespace's own addresses.
func (b *Backend) GuestAddrs() (netip.Addr, netip.Addr) { return b.guestV4.Addr(), b.guestV6.Addr() }

// HostVeth is the host-side interface name.
func (b *Backend) HostVeth() string { return b.hostVeth }

// HostAlias implements backend.Backend.
func (b *Backend) HostAlias() string { return AliasName }

// Profile implements backend.Backend.
func (b *Backend) Profile() backend.Profile { return profile }

// Runner implements backend.Backend.
func (b *Backend) Runner() guest.Runner { return b.traced }

// EtcDir is the per-namespace /etc overlay ip netns exec applies.
func (b *Backend) EtcDir() string { return filepath.Join("/etc/netns", b.ns) }

func run(ctx context.Context, argv ...string) error {
	var stderr bytes.Buffer
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func nsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

// hostIP is `ip` in the host side's namespace.
func (b *Backend) hostIP(args ...string) []string {
	if b.opts.HostNamespace != "" {
		return append([]string{"ip", "-n", b.opts.HostNamespace}, args...)
	}
	return append([]string{"ip"}, args...)
}

func (b *Backend) linkExists(ctx context.Context) bool {
	argv := b.hostIP("link", "show", "dev", b.hostVeth)
	return exec.CommandContext(ctx, argv[0], argv[1:]...).Run() == nil
}

// EnsureUp creates the namespace, the veth pair, the addresses and the hosts file, each
// only if missing. There is no default route: the namespace reaches the alias's /30 and
// /64 and nothing else unless someone adds routes.
func (b *Backend) EnsureUp(ctx context.Context) error {
	if b.opts.HostNamespace != "" && !nsExists(b.opts.HostNamespace) {
		return fmt.Errorf("netns backend: host-side namespace %s does not exist", b.opts.HostNamespace)
	}
	if err := b.checkAddrFree(ctx); err != nil {
		return err
	}
	if !nsExists(b.ns) {
		if err := run(ctx, "ip", "netns", "add", b.ns); err != nil {
			return fmt.Errorf("creating namespace: %w", err)
		}
	}
	if !b.linkExists(ctx) {
		if err := run(ctx, b.hostIP("link", "add", b.hostVeth, "type", "veth", "peer", "name", b.guestVeth, "netns", b.ns)...); err != nil {
			return fmt.Errorf("creating veth pair: %w", err)
		}
	}
	g := func(args ...string) []string { return append([]string{"ip", "-n", b.ns}, args...) }
	steps := [][]string{
		b.hostIP("addr", "replace", b.hostV4.String(), "dev", b.hostVeth),
		b.hostIP("-6", "addr", "replace", b.hostV6.String(), "dev", b.hostVeth, "nodad"),
		b.hostIP("link", "set", b.hostVeth, "up"),
		g("link", "set", "lo", "up"),
		g("addr", "replace", b.guestV4.String(), "dev", b.guestVeth),
		g("-6", "addr", "replace", b.guestV6.String(), "dev", b.guestVeth, "nodad"),
		g("link", "set", b.guestVeth, "up"),
	}
	for _, s := range steps {
		if err := run(ctx, s...); err != nil {
			return fmt.Errorf("configuring %s: %w", b.ns, err)
		}
	}
	if err := os.MkdirAll(b.EtcDir(), 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost\n%s\t%s\n%s\t%s\n", b.hostV4.Addr(), AliasName, b.hostV6.Addr(), AliasName)
	if err := os.WriteFile(filepath.Join(b.EtcDir(), "hosts"), []byte(hosts), 0o644); err != nil {
		return fmt.Errorf("writing the namespace's hosts file: %w", err)
	}
	// No resolver: without this the namespace would see the host's resolv.conf. glibc then
	// asks 127.0.0.1 inside the namespace, where nothing listens, so a lookup of anything
	// but the alias fails at once and no DNS query leaves the namespace.
	resolv := "# lever netns substrate: no resolver; " + AliasName + " is in /etc/hosts\n"
	if err := os.WriteFile(filepath.Join(b.EtcDir(), "resolv.conf"), []byte(resolv), 0o644); err != nil {
		return fmt.Errorf("writing the namespace's resolv.conf: %w", err)
	}
	return nil
}

// checkAddrFree refuses to reuse an alias address that an interface other than this
// instance's veth already carries (two instances whose names hash alike).
func (b *Backend) checkAddrFree(ctx context.Context) error {
	argv := b.hostIP("-o", "addr", "show", "to", b.hostV4.Addr().String()+"/32")
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
	if err != nil {
		return nil // nothing to compare against; the add step will report real trouble
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && !strings.HasPrefix(f[1], b.hostVeth) {
			return fmt.Errorf("netns backend: alias address %s is already on interface %s; rename the instance", b.hostV4.Addr(), f[1])
		}
	}
	return nil
}

// Stop ends the guest: it kills the processes left in the namespace and deletes the
// namespace (which takes the veth pair and every iptables rule in it along). A namespace
// has no disk; what survives is what a VM's disk would keep of lever's making: the
// /etc/netns/<ns> overlay and the instance's host-side state. Like a guest reboot, the
// firewall is gone until the next apply.
func (b *Backend) Stop(ctx context.Context) error {
	if !nsExists(b.ns) {
		return nil
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "pids", b.ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if b.linkExists(ctx) {
		if err := run(ctx, b.hostIP("link", "del", b.hostVeth)...); err != nil {
			return fmt.Errorf("stopping %s: %w", b.ns, err)
		}
	}
	if err := run(ctx, "ip", "netns", "del", b.ns); err != nil {
		return fmt.Errorf("stopping %s: %w", b.ns, err)
	}
	return nil
}

// Destroy stops the guest and removes every host file the backend made for it, and its
// claim on the run user (only its own: a claim another jail holds stays).
func (b *Backend) Destroy(ctx context.Context) error {
	if err := b.Stop(ctx); err != nil {
		return err
	}
	if err := os.RemoveAll(b.EtcDir()); err != nil {
		return fmt.Errorf("removing %s: %w", b.EtcDir(), err)
	}
	// Last: while the claim stands, no other jail can take the run user.
	return b.releaseRunUser()
}

// Runner runs guest commands with `ip netns exec`.
type Runner struct {
	Namespace string
	RunUser   string
}

// Run implements guest.Runner. Root commands are `ip netns exec <ns> argv`; run-user
// commands add `runuser -u <user> --`. A namespace that does not exist is a failure to
// reach the guest (an error), not a command's exit status.
func (r *Runner) Run(ctx context.Context, c guest.Cmd) (guest.Result, error) {
	if len(c.Argv) == 0 {
		return guest.Result{}, errors.New("netns runner: empty command")
	}
	if !nsExists(r.Namespace) {
		return guest.Result{}, fmt.Errorf("guest namespace %s does not exist (is the jail up?)", r.Namespace)
	}
	argv := []string{"netns", "exec", r.Namespace}
	if c.As == guest.RunUser {
		user := r.RunUser
		if user == "" {
			user = DefaultRunUser
		}
		argv = append(argv, "runuser", "-u", user, "--")
	}
	argv = append(argv, c.Argv...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	err := cmd.Run()
	res := guest.Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		res.ExitCode = ee.ExitCode()
	default:
		return res, fmt.Errorf("running %q in namespace %s: %w", strings.Join(c.Argv, " "), r.Namespace, err)
	}
	return res, nil
}
