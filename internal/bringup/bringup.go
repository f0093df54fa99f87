package bringup

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/cap/ca"
	"github.com/lever-jail/lever/internal/cap/ticket"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/jail"
	"github.com/lever-jail/lever/internal/levimage"
	"github.com/lever-jail/lever/internal/levimage/debroot"
	"github.com/lever-jail/lever/internal/levsettings"
	"github.com/lever-jail/lever/internal/provision"
)

// Options configure one bring-up.
type Options struct {
	Cfg     *config.Config
	Backend backend.Backend
	// Exe is the lever executable: it runs the broker child (on the host only).
	Exe string
	// LevBinary overrides where the static Linux lev binary for the guest is found; it
	// must match the guest's architecture.
	LevBinary string
	Out       io.Writer
	Fresh     bool // recreate lev containers (a manager gains/loses /dev/kvm only so)
	// BrokerEnv is extra environment for the broker child (tests: upstream roots).
	BrokerEnv []string
}

// Instance is a configured jail with everything derived from its config and backend.
type Instance struct {
	opts     Options
	cfg      *config.Config
	b        backend.Backend
	Runner   *guest.Counting
	Spec     guest.EgressSpec
	RunUser  string
	InPlace  bool // the guest sees the host's filesystem (netns substrate)
	TreeSrc  string
	provP    provision.Params
	uid      int
	aliasV4  string
	aliasV6  string
	client   *jail.Client
	imageRef string
	image    *levimage.Image
	source   levimage.Source
	// settings are the user's lev settings (lev.config, lev.agents, lev.policy), read and
	// validated on the host by New; settingsHash is their Hash.
	settings     *levsettings.Bundle
	settingsHash string
	// benchRef is the workbench image (the agents' tools run in it), set by the image
	// step; levBin/levDigest are the lev binary layered into it.
	benchRef      string
	levBin        string
	levDigest     string
	levErr        error
	statusSum     string // the guest's package-state digest (debroot.StateDigestScript), from observe
	tarballDigest string
}

// New derives an Instance. Nothing is touched.
func New(o Options) (*Instance, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	in := &Instance{opts: o, cfg: o.Cfg, b: o.Backend, Runner: &guest.Counting{Inner: o.Backend.Runner()}}
	// Every snapshot of this instance also runs the backend's in-guest containment check.
	in.Spec = backend.Guard(o.Backend, guest.SpecFor(o.Cfg, o.Backend.HostAlias()))
	in.Spec.RoundTrips = guest.FileRoundTrips{Path: filepath.Join(o.Cfg.StateDir(), "guest", "nft-roundtrip")}
	in.RunUser = "lever"
	// A backend whose guest already has its run user (Lima's default user) names it.
	if n, ok := o.Backend.(interface{ RunUser() string }); ok && n.RunUser() != "" {
		in.RunUser = n.RunUser()
	}
	if r, ok := o.Backend.Runner().(*netns.Runner); ok {
		in.InPlace = true
		if r.RunUser != "" {
			in.RunUser = r.RunUser
		}
	}
	in.TreeSrc = jail.TreeDir
	in.provP = provision.Params{RunUser: in.RunUser, SysctlFile: "/etc/sysctl.d/60-lever.conf"}
	if in.InPlace {
		// The netns guest is the host: its tree is the host path, and lever writes no
		// persistent host file outside the instance's state dir.
		in.TreeSrc = o.Cfg.TreePath
		in.provP.Stamp = filepath.Join(o.Cfg.StateDir(), "guest", "provision.stamp")
		in.provP.SysctlFile = ""
	}
	// The user's lev settings are checked here, before any step runs, with lev's own
	// loaders: a bad file fails up and apply --dry-run alike and changes nothing.
	bundle, err := levsettings.Load(levsettings.Paths{Config: o.Cfg.Lev.Config, Agents: o.Cfg.Lev.Agents, Policy: o.Cfg.Lev.Policy})
	if err != nil {
		return nil, err
	}
	in.settings, in.settingsHash = bundle, bundle.Hash()
	// One Linux lev, for the guest's architecture, goes into the lev image and the
	// workbench and serves the guest-side helpers (lev __guest): the host's own executable
	// never enters the guest (a Mac's lever could not run there).
	arch, archErr := backend.GuestArch(context.Background(), o.Backend)
	src, err := levimage.Resolve(o.Cfg, o.LevBinary, arch)
	if err != nil {
		if archErr != nil {
			return nil, archErr
		}
		return nil, err
	}
	in.source = src
	switch src.Kind {
	case levimage.Built:
		im, err := levimage.Build(levimage.Spec{LevBinary: src.Path, Arch: arch})
		if err != nil {
			return nil, err
		}
		in.image, in.imageRef = im, im.Ref
	case levimage.Configured:
		in.imageRef = src.Ref
	case levimage.Tarball:
		in.imageRef = "tarball " + src.Path
	}
	// The workbench always carries lever's own static lev (it serves the exec channel),
	// whichever lev image the lev containers use.
	in.levBin = o.LevBinary
	if src.Kind == levimage.Built {
		in.levBin = src.Path
	}
	switch {
	case archErr != nil:
		in.levErr = archErr
	case in.levBin == "":
		in.levBin, in.levErr = levimage.FindLevBinary(arch)
	default:
		in.levErr = levimage.CheckStatic(in.levBin, arch)
	}
	if in.levErr == nil {
		in.levDigest, in.levErr = levimage.FileDigest(in.levBin)
	}
	if in.levErr != nil {
		in.levErr = fmt.Errorf("the guest-side helpers and the workbench need a static Linux lev for the guest: %w", in.levErr)
	}
	return in, nil
}

// Agents are the enrolment dir names: manager, worker-<name>...
func (in *Instance) Agents() []string {
	out := []string{jail.AgentDir(jail.Manager, "")}
	for _, w := range in.cfg.Workers {
		out = append(out, jail.AgentDir(jail.Worker, w.Name))
	}
	return out
}

func (in *Instance) agentsRoot() string {
	return fmt.Sprintf("/run/user/%d/lever/agents", in.uid)
}

// benchRoot holds each agent's exec-channel dir (run user's tmpfs, like agentsRoot).
func (in *Instance) benchRoot() string {
	return fmt.Sprintf("/run/user/%d/lever/bench", in.uid)
}

// levHomeRoot holds each agent's lev home: persistent, outside the tree, root-owned so the
// run user cannot swap it. On the netns substrate the guest is the host: the instance's
// state dir.
func (in *Instance) levHomeRoot() string {
	if in.InPlace {
		return filepath.Join(realDir(in.cfg.StateDir()), "guest", "levhome")
	}
	return "/var/lib/lever/" + in.cfg.Name + "/lev"
}

// realDir is d as an absolute path without symlinks (the enrol helper refuses a
// symlinked component on the way to the lev homes).
func realDir(d string) string {
	abs, err := filepath.Abs(d)
	if err != nil {
		return d
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	return abs
}

// levHomeBase is where lever's own part of levHomeRoot's path starts (the enrol helper
// makes and opens dirs only from there down): on the netns substrate, lever's state root.
func (in *Instance) levHomeBase() string {
	if in.InPlace {
		return realDir(config.StateRoot())
	}
	return "/var/lib/lever"
}

// observeScript reads, in one guest call: the provisioning stamp and boot id, the run
// user's uid, whether its podman service is up, the digest of the guest's package state
// (debroot.StateDigestScript: the default workbench's tag derives from it, so a warm up
// finds it with no extra call), and each agent's client certificate.
//
// Per agent it also prints, before the certificate, "settings=<hash> dirs=<ok|missing>":
// the hash file beside the pushed lev settings and whether the agent's lev home and bench
// dir exist, so stale settings cost no extra guest call to find.
const observeScript = `stamp=$1; user=$2; levhome=$3; shift 3
cat /proc/sys/kernel/random/boot_id; stat -c '%u %a' "$stamp" 2>/dev/null || echo none; cat "$stamp" 2>/dev/null || echo
echo @@
uid=$(id -u "$user" 2>/dev/null) || uid=none
echo "$uid"
echo @@
if [ "$uid" != none ]; then
	sock=/run/user/$uid/podman/podman.sock; pidf=/run/user/$uid/podman/lever-service.pid
	st=$( [ -f "$pidf" ] && sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$(cat "$pidf")/status" 2>/dev/null)
	if [ -S "$sock" ] && { [ ! -f "$pidf" ] || { [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]; }; }; then echo up; else echo down; fi
else echo down; fi
echo @@
` + debroot.StateDigestScript + `
echo
for a in "$@"; do echo "@@ $a"
	[ "$uid" = none ] && continue
	d=missing; [ -d "$levhome/$a" ] && [ -d "/run/user/$uid/lever/bench/$a" ] && d=ok
	echo "settings=$(cat "/run/user/$uid/lever/agents/$a/settings.sha256" 2>/dev/null) dirs=$d"
	cat "/run/user/$uid/lever/agents/$a/client.crt" 2>/dev/null
done
exit 0
`

// Observe looks without changing anything: one guest call (when the guest is reachable),
// the broker's state file, and the podman socket.
func (in *Instance) Observe(ctx context.Context) (Observed, provision.State) {
	o := Observed{Enrolled: map[string]bool{}, Settings: map[string]bool{}, Containers: map[string]string{}, ImageRef: in.imageRef}
	var st provision.State
	argv := append([]string{"/bin/sh", "-c", observeScript, "sh", in.provP.WithDefaults().Stamp, in.RunUser, in.levHomeRoot()}, in.Agents()...)
	res, err := in.Runner.Run(ctx, guest.Cmd{As: guest.Root, Argv: argv})
	if err != nil || res.ExitCode != 0 {
		return o, st
	}
	o.GuestReachable = true
	secs := strings.Split(string(res.Stdout), "@@")
	if len(secs) >= 4 {
		st = provision.ParseState([]byte(secs[0]))
		o.StampCurrent = st.Current(in.provP)
		if uid, err := strconv.Atoi(strings.TrimSpace(secs[1])); err == nil {
			in.uid = uid
		}
		o.ServiceUp = strings.HasPrefix(strings.TrimSpace(secs[2]), "up")
		if sum := strings.TrimSpace(secs[3]); len(sum) == 64 {
			in.statusSum = sum
		}
		caPEM, _ := os.ReadFile(brokerctl.CAPath(in.cfg.StateDir()))
		for _, s := range secs[4:] {
			name, body, _ := strings.Cut(strings.TrimPrefix(s, " "), "\n")
			name = strings.TrimSpace(name)
			line, cert, _ := strings.Cut(body, "\n")
			o.Enrolled[name] = certValid([]byte(cert), caPEM)
			o.Settings[name] = line == "settings="+in.settingsHash+" dirs=ok"
		}
	}
	if bs, err := brokerctl.Status(in.cfg.StateDir()); err == nil && bs.Running {
		o.BrokerRunning = true
		o.BrokerSANOK = bs.State != nil && in.aliasV4 != "" && contains(bs.State.SANIPs, in.aliasV4)
		if in.aliasV4 == "" && bs.State != nil {
			o.BrokerSANOK = len(bs.State.SANIPs) > 0
		}
	}
	if o.ServiceUp && in.uid > 0 {
		if c, err := in.connect(ctx); err == nil {
			if in.image != nil {
				o.ImagePresent, _ = c.ImageExists(in.imageRef)
			}
			if ref, err := in.benchKnownRef(c); err == nil && ref != "" {
				o.BenchRef = ref
				o.BenchPresent, _ = c.ImageExists(ref)
			}
			if cs, err := c.List(in.cfg.Name); err == nil {
				for _, s := range cs {
					if s.Running {
						o.Containers[s.Name] = "running"
					} else {
						o.Containers[s.Name] = "stopped"
					}
				}
			}
		}
	}
	return o, st
}

// ObserveEgress adds the egress verification to an observation (one read-only guest
// call); dry runs use it, Execute verifies in its egress step instead.
func (in *Instance) ObserveEgress(ctx context.Context, o *Observed) {
	if !o.GuestReachable {
		return
	}
	rep, err := guest.VerifyEgress(ctx, in.Runner, in.Spec)
	if err != nil {
		o.EgressDiff = []string{err.Error()}
		return
	}
	o.EgressMatch, o.EgressDiff = rep.Diff.Match(), rep.Lines
	in.aliasV4, in.aliasV6 = rep.Desired.AliasV4, rep.Desired.AliasV6
	if bs, err := brokerctl.Status(in.cfg.StateDir()); err == nil && bs.Running && bs.State != nil {
		o.BrokerSANOK = contains(bs.State.SANIPs, in.aliasV4)
	}
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

// certValid: a client certificate signed by the current CA with at least a third of its
// lifetime (and five minutes) left.
func certValid(certPEM, caPEM []byte) bool {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return false
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return false
	}
	left, life := time.Until(c.NotAfter), c.NotAfter.Sub(c.NotBefore)
	if left < 5*time.Minute || left < life/3 {
		return false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return false
	}
	_, err = c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}

// SocketForwarder is what a VM backend implements so lever can reach the run user's
// podman REST socket from the host: forward a guest unix socket to a host unix socket
// (Lima: `ssh -O forward -L host:guest` over the ControlMaster it already keeps), and say
// so idempotently.
type SocketForwarder interface {
	ForwardSocket(ctx context.Context, guestPath, hostPath string) error
}

func (in *Instance) socketURI(ctx context.Context) (string, error) {
	if in.InPlace {
		return "unix://" + jail.SocketPath(in.uid), nil
	}
	f, ok := in.b.(SocketForwarder)
	if !ok {
		return "", fmt.Errorf("backend %s cannot forward the guest's podman socket to the host (it does not implement bringup.SocketForwarder)", in.b.Name())
	}
	host := filepath.Join(in.cfg.StateDir(), "podman.sock")
	if err := os.MkdirAll(filepath.Dir(host), 0o700); err != nil {
		return "", err
	}
	if err := f.ForwardSocket(ctx, jail.SocketPath(in.uid), host); err != nil {
		return "", fmt.Errorf("forwarding the guest's podman socket: %w", err)
	}
	return "unix://" + host, nil
}

func (in *Instance) connect(ctx context.Context) (*jail.Client, error) {
	if in.client != nil {
		return in.client, nil
	}
	uri, err := in.socketURI(ctx)
	if err != nil {
		return nil, err
	}
	c, err := jail.Connect(ctx, uri)
	if err != nil {
		return nil, err
	}
	in.client = c
	return c, nil
}

// Result of one executed step.
type StepResult struct {
	ID       string        `json:"id"`
	Changed  bool          `json:"changed"`
	Detail   string        `json:"detail"`
	Duration time.Duration `json:"duration_ns"`
	Calls    int64         `json:"guest_calls"`
}

// Result of a whole bring-up.
type Result struct {
	Steps      []StepResult  `json:"steps"`
	Changed    bool          `json:"changed"`
	GuestCalls int64         `json:"guest_calls"`
	Duration   time.Duration `json:"duration_ns"`
}

// Execute brings the jail up. Progress goes to Options.Out, one line per step.
func (in *Instance) Execute(ctx context.Context) (*Result, error) {
	start := time.Now()
	in.Runner.Reset()
	res := &Result{}
	obs, st := in.Observe(ctx)
	steps := []struct {
		id string
		fn func(context.Context) (bool, string, error)
	}{
		{StepJail, func(ctx context.Context) (bool, string, error) {
			if obs.GuestReachable {
				// A running guest is checked again, every time: its host-side containment
				// here (no guest call), its in-guest part in the egress step's snapshot.
				if c, ok := in.b.(backend.Containment); ok {
					if err := c.CheckHost(ctx); err != nil {
						return false, "", err
					}
					return false, "guest is up; containment re-checked", nil
				}
				return false, "guest is up", nil
			}
			if err := in.b.EnsureUp(ctx); err != nil {
				return false, "", err
			}
			return true, "guest started", nil
		}},
		{StepEgress, in.stepEgress},
		{StepProvision, func(ctx context.Context) (bool, string, error) {
			var sp *provision.State
			if obs.GuestReachable {
				sp = &st
			}
			r, err := provision.Ensure(ctx, in.Runner, in.provP, sp)
			if err != nil {
				return false, "", err
			}
			if r.Skipped {
				if in.uid == 0 {
					// the guest was down when observed: read the run user's uid now
					res, err := guest.RunOK(ctx, in.Runner, guest.Cmd{As: guest.Root, Argv: []string{"id", "-u", in.RunUser}})
					if err != nil {
						return false, "", fmt.Errorf("run user %s: %w", in.RunUser, err)
					}
					if in.uid, err = strconv.Atoi(strings.TrimSpace(string(res.Stdout))); err != nil {
						return false, "", fmt.Errorf("run user %s: uid %q", in.RunUser, res.Stdout)
					}
				}
				return false, "stamp current: installs skipped", nil
			}
			in.uid = r.UID
			if len(r.Changes) == 0 {
				return false, "nothing to change (stamp refreshed)", nil
			}
			// Provisioning may have installed packages: the observed dpkg status digest
			// is stale, so the image step reads the database again.
			in.statusSum = ""
			return true, strings.Join(r.Changes, "; "), nil
		}},
		{StepPodman, func(ctx context.Context) (bool, string, error) {
			if obs.ServiceUp {
				_, err := in.connect(ctx)
				return false, "podman service up", err
			}
			if err := jail.StartService(ctx, in.Runner, in.RunUser); err != nil {
				return false, "", err
			}
			_, err := in.connect(ctx)
			return true, "started the run user's podman service", err
		}},
		{StepBroker, in.stepBroker},
		{StepEnrol, func(ctx context.Context) (bool, string, error) { return in.stepEnrol(ctx, obs) }},
		{StepImage, in.stepImage},
		{StepLev, in.stepLev},
	}
	tty := isTerminal(in.opts.Out)
	for i, s := range steps {
		t0, c0 := time.Now(), in.Runner.Calls()
		if tty {
			// on a terminal the step shows while it runs; its result line replaces it
			fmt.Fprintf(in.opts.Out, "[%d/%d] %-9s ...", i+1, len(steps), s.id)
		}
		changed, detail, err := s.fn(ctx)
		if tty {
			fmt.Fprint(in.opts.Out, "\r\033[K")
		}
		sr := StepResult{ID: s.id, Changed: changed, Detail: detail, Duration: time.Since(t0), Calls: in.Runner.Calls() - c0}
		if err != nil {
			fmt.Fprintf(in.opts.Out, "[%d/%d] %-9s FAILED after %s: %v\n", i+1, len(steps), s.id, round(sr.Duration), err)
			return res, fmt.Errorf("%s: %w", s.id, err)
		}
		verb := "ok     "
		if changed {
			verb = "changed"
		}
		fmt.Fprintf(in.opts.Out, "[%d/%d] %-9s %s %7s  %s\n", i+1, len(steps), s.id, verb, round(sr.Duration), detail)
		res.Steps = append(res.Steps, sr)
		res.Changed = res.Changed || changed
	}
	res.GuestCalls = in.Runner.Calls()
	res.Duration = time.Since(start)
	if res.Changed {
		fmt.Fprintf(in.opts.Out, "jail %s is up (%s, %d guest calls)\n", in.cfg.Name, round(res.Duration), res.GuestCalls)
	} else {
		fmt.Fprintf(in.opts.Out, "jail %s is up: nothing changed (%s, %d guest calls)\n", in.cfg.Name, round(res.Duration), res.GuestCalls)
	}
	return res, nil
}

func round(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func (in *Instance) stepEgress(ctx context.Context) (bool, string, error) {
	rep, err := guest.EnsureEgress(ctx, in.Runner, in.Spec)
	if err != nil {
		return false, "", err
	}
	in.aliasV4, in.aliasV6 = rep.Desired.AliasV4, rep.Desired.AliasV6
	if rep.Outcome == guest.Unchanged {
		return false, "verified: both families match (alias " + in.aliasV4 + ")", nil
	}
	d := "rebuilt"
	if len(rep.Lines) > 0 {
		d += ": " + strings.Join(rep.Lines, "; ")
	}
	return true, d, nil
}

func (in *Instance) brokerURL() string {
	return "https://" + net.JoinHostPort(in.aliasV4, strconv.Itoa(in.cfg.Broker.JailPort))
}

func (in *Instance) stepBroker(ctx context.Context) (bool, string, error) {
	state := in.cfg.StateDir()
	bs, err := brokerctl.Status(state)
	if err != nil {
		return false, "", err
	}
	if bs.Running && bs.State != nil && contains(bs.State.SANIPs, in.aliasV4) {
		return false, fmt.Sprintf("running (pid %d), certificate for %s until %s", bs.PID, in.aliasV4, bs.State.ServerCertNotAfter.Format(time.RFC3339)), nil
	}
	what := "started"
	if bs.Running {
		if _, err := brokerctl.Stop(ctx, state, 10*time.Second); err != nil {
			return false, "", err
		}
		what = "restarted (its certificate did not name " + in.aliasV4 + ")"
	}
	ips := in.aliasV4
	if in.aliasV6 != "" {
		ips += "," + in.aliasV6
	}
	env := append(os.Environ(), brokerctl.EnvAliasIP+"="+ips)
	env = append(env, in.opts.BrokerEnv...)
	bs, err = brokerctl.Start(ctx, state, brokerctl.StartOptions{Argv: []string{in.opts.Exe, "broker", "serve", in.cfg.Path}, Env: env})
	if err != nil {
		return false, "", fmt.Errorf("starting the broker: %w", err)
	}
	return true, fmt.Sprintf("%s (pid %d) on %s", what, bs.PID, bs.State.Listen), nil
}

func (in *Instance) stepEnrol(ctx context.Context, obs Observed) (bool, string, error) {
	var need, push []string
	for _, a := range in.Agents() {
		if !obs.Enrolled[a] {
			need = append(need, a)
		}
		if !obs.Settings[a] {
			push = append(push, a)
		}
	}
	if len(need) == 0 && len(push) == 0 {
		return false, "every agent holds a valid client certificate and current lev settings", nil
	}
	caPEM, err := os.ReadFile(brokerctl.CAPath(in.cfg.StateDir()))
	if err != nil {
		return false, "", fmt.Errorf("reading the broker CA: %w", err)
	}
	store, err := ticket.Open(brokerctl.TicketDir(in.cfg.StateDir()))
	if err != nil {
		return false, "", err
	}
	req := EnrolRequest{BrokerURL: in.brokerURL(), CAPEM: string(caPEM), UID: in.uid, LevHomeRoot: in.levHomeRoot(), LevHomeBase: in.levHomeBase()}
	if len(push) > 0 {
		req.Settings, req.SettingsHash = in.settings, in.settingsHash
	}
	for _, a := range in.Agents() {
		ea := EnrolAgent{Name: in.cfg.Name + "-" + a, Dir: in.agentsRoot() + "/" + a,
			Home: path.Join(in.levHomeRoot(), a), Bench: in.benchRoot() + "/" + a, Push: !obs.Settings[a]}
		if !obs.Enrolled[a] {
			role := ca.RoleWorker
			if a == jail.AgentDir(jail.Manager, "") {
				role = ca.RoleManager
			}
			tk, err := store.Issue(ea.Name, role, 10*time.Minute)
			if err != nil {
				return false, "", err
			}
			ea.Ticket = tk
		}
		if ea.Ticket != "" || ea.Push {
			req.Agents = append(req.Agents, ea)
		}
	}
	body, _ := json.Marshal(req)
	if len(body) > MaxEnrolRequest {
		return false, "", fmt.Errorf("the enrolment request is %d bytes, over the guest helper's %d: make lev.agents smaller", len(body), MaxEnrolRequest)
	}
	argv, prefix, err := in.helperArgv(guestside.ModeEnrol)
	if err != nil {
		return false, "", err
	}
	if _, err := guest.RunOK(ctx, in.Runner, guest.Cmd{As: guest.Root, Argv: argv, Stdin: append(prefix, body...)}); err != nil {
		return false, "", fmt.Errorf("enrolling in the guest: %w", err)
	}
	var parts []string
	if len(need) > 0 {
		parts = append(parts, "enrolled "+strings.Join(need, ", ")+" (keys generated in the guest)")
	}
	if len(push) > 0 {
		parts = append(parts, "lev settings "+in.settingsHash[:12]+" and dirs for "+strings.Join(push, ", "))
	}
	return true, strings.Join(parts, "; "), nil
}

// stepImage makes both images present: the lev image (the lev containers) and the
// workbench (the agents' tools), each built or loaded once and found by its content tag
// afterwards.
func (in *Instance) stepImage(ctx context.Context) (bool, string, error) {
	c, err := in.connect(ctx)
	if err != nil {
		return false, "", err
	}
	t0 := time.Now()
	ch1, d1, err := in.stepLevImage(c)
	if err != nil {
		return false, "", err
	}
	if ch1 {
		d1 += " in " + round(time.Since(t0))
	}
	ch2, d2, err := in.ensureBench(ctx, c)
	if err != nil {
		return false, "", fmt.Errorf("workbench: %w", err)
	}
	return ch1 || ch2, d1 + "; " + d2, nil
}

func (in *Instance) stepLevImage(c *jail.Client) (bool, string, error) {
	switch in.source.Kind {
	case levimage.Configured:
		ok, err := c.ImageExists(in.imageRef)
		if err != nil {
			return false, "", err
		}
		if !ok {
			return false, "", fmt.Errorf("lev.image %s is not in the run user's podman (no registry is used); load it or set lev.image_tarball", in.imageRef)
		}
		return false, in.imageRef + " present", nil
	case levimage.Tarball:
		data, err := os.ReadFile(in.source.Path)
		if err != nil {
			return false, "", err
		}
		sum := sha256.Sum256(data)
		marker := filepath.Join(in.cfg.StateDir(), "guest", fmt.Sprintf("image-%x.ref", sum[:8]))
		if ref, err := os.ReadFile(marker); err == nil {
			if ok, _ := c.ImageExists(string(ref)); ok {
				in.imageRef = string(ref)
				return false, in.imageRef + " present", nil
			}
		}
		names, err := c.LoadArchive(data)
		if err != nil {
			return false, "", err
		}
		if len(names) == 0 {
			return false, "", fmt.Errorf("lev.image_tarball %s loaded no image", in.source.Path)
		}
		in.imageRef = names[0]
		os.MkdirAll(filepath.Dir(marker), 0o700)
		os.WriteFile(marker, []byte(in.imageRef), 0o600)
		return true, "loaded " + in.imageRef, nil
	}
	ok, err := c.ImageExists(in.imageRef)
	if err != nil {
		return false, "", err
	}
	if ok {
		return false, in.imageRef + " present", nil
	}
	if _, err := c.LoadArchive(in.image.Archive); err != nil {
		return false, "", err
	}
	return true, fmt.Sprintf("built and loaded %s (%d KiB)", in.imageRef, len(in.image.Archive)>>10), nil
}

// managerKVM says whether the manager gets /dev/kvm: a backend that names the manager's
// devices (Lima: only under nested_virt) decides; otherwise nested_virt does. Devices are
// create-time only: a change shows as a new container hash and needs --fresh.
func (in *Instance) managerKVM() bool {
	if d, ok := in.b.(interface{ ManagerDevices() []string }); ok {
		for _, dev := range d.ManagerDevices() {
			if dev == "/dev/kvm" {
				return true
			}
		}
		return false
	}
	return in.cfg.NestedVirt
}

// Containers is the plan for this instance: each agent's lev container and its bench.
func (in *Instance) Containers() ([]jail.Container, error) {
	bench := in.benchRef
	if bench == "" {
		// No workbench ref: a caller that never ran the image step (unit tests, which
		// build no workbench), or a build before the workbench image step (helper
		// workbench) sets it. The lev image stands in; it has no userland.
		bench = in.imageRef
	}
	p := jail.Params{
		Instance: in.cfg.Name, Image: in.imageRef, BenchImage: bench, TreeSource: in.TreeSrc,
		ReadOnly: in.cfg.Manager.ReadOnly, NestedVirt: in.managerKVM(),
		TicketRoot: in.agentsRoot(), LevHomeRoot: in.levHomeRoot(), BenchRoot: in.benchRoot(),
		Policy:  in.settings != nil && in.settings.HasPolicy,
		Command: []string{"serve", "--token-file", jail.TicketMount + "/" + FileToken},
		Env: map[string]string{
			"LEV_PROVIDER":          "openai",
			"LEV_PROVIDER_BASE_URL": in.brokerURL() + "/llm",
			"LEV_TLS_CA":            jail.TicketMount + "/" + FileCA,
			"LEV_TLS_CERT":          jail.TicketMount + "/" + FileCert,
			"LEV_TLS_KEY":           jail.TicketMount + "/" + FileKey,
			// lev reads its settings when it starts: a new hash here changes the lev
			// containers' spec, so the next up restarts them on the settings it pushed.
			"LEVER_SETTINGS": in.settingsHash,
		},
	}
	if rt := os.Getenv("LEVER_OCI_RUNTIME"); rt != "" {
		p.Runtime = rt
	}
	for _, w := range in.cfg.Workers {
		p.Workers = append(p.Workers, jail.WorkerSpec{Name: w.Name, Dir: w.Dir})
	}
	cs, err := jail.Plan(p)
	if err != nil {
		return nil, err
	}
	for i := range cs {
		if cs[i].Role == jail.Bench {
			continue
		}
		// An image of the user's choosing for a lev container (it must hold /lev and be
		// in the run user's podman already: no registry is used).
		if img := in.containerImage(cs[i]); img != "" {
			cs[i].Image = img
		}
		if cs[i].Role == jail.Manager && in.cfg.Lev.Blueprint != "" {
			// lev.blueprint is a path in the tree; `lev run` with no agent runs it.
			cs[i].Env["LEV_BLUEPRINT"] = path.Join(jail.TreeDir, filepath.ToSlash(in.cfg.Lev.Blueprint))
		}
		cs[i].Rehash()
	}
	// No LEV_PROTECT: every lev home is outside the tree now, so the manager's tools
	// cannot reach a worker's lev state through the tree at all.
	return cs, nil
}

// containerImage is workers[].image (defaulting to manager.image) or manager.image for
// ct, or "" for lever's lev image.
func (in *Instance) containerImage(ct jail.Container) string {
	if ct.Role == jail.Manager {
		return in.cfg.Manager.Image
	}
	for _, w := range in.cfg.Workers {
		if ct.Env["LEVER_WORKER"] == w.Name && w.Image != "" {
			return w.Image
		}
	}
	return in.cfg.Manager.Image // a worker's image defaults to the manager's
}

// customImagesPresent checks the per-container images lever.yaml names, each by its key.
func (in *Instance) customImagesPresent(c *jail.Client) error {
	keys := map[string]string{}
	if in.cfg.Manager.Image != "" {
		keys[in.cfg.Manager.Image] = "manager.image"
	}
	for i, w := range in.cfg.Workers {
		if w.Image != "" {
			keys[w.Image] = fmt.Sprintf("workers[%d].image", i)
		}
	}
	for img, key := range keys {
		ok, err := c.ImageExists(img)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s %s is not in the run user's podman (no registry is used): load it there first", key, img)
		}
	}
	return nil
}

func (in *Instance) stepLev(ctx context.Context) (bool, string, error) {
	c, err := in.connect(ctx)
	if err != nil {
		return false, "", err
	}
	cs, err := in.Containers()
	if err != nil {
		return false, "", err
	}
	if err := in.customImagesPresent(c); err != nil {
		return false, "", err
	}
	c.BeforeStart = func(ct jail.Container) error { return in.checkMountSources(ctx, ct) }
	changed := false
	var parts []string
	for _, ct := range cs {
		ch, err := c.Ensure(ct, in.opts.Fresh)
		if err != nil {
			return false, "", err
		}
		if ch != jail.Unchanged {
			changed = true
		}
		parts = append(parts, ct.Name+" "+string(ch))
	}
	// A stopped-then-started container may exit at once (bad config): report it.
	time.Sleep(0)
	for _, ct := range cs {
		st, err := c.Inspect(ct.Name)
		if err == nil && st != nil && !st.Running {
			logs, _ := c.Logs(ct.Name)
			return changed, "", fmt.Errorf("%s is %s (exit %d): %s", ct.Name, st.Status, st.ExitCode, lastLines(logs, 5))
		}
	}
	sort.Strings(parts)
	return changed, strings.Join(parts, ", "), nil
}

// checkMountSourcesScript fails when a bind-mount source inside the tree is missing or
// reaches its real path through a symlink. $1 is the tree; the rest are paths below it.
const checkMountSourcesScript = `t=$(realpath -e -- "$1") || { echo "tree $1 is missing" >&2; exit 3; }; shift
for rel do
	r=$(realpath -e -- "$t/$rel") || { echo "mount source $t/$rel is missing" >&2; exit 3; }
	[ "$r" = "$t/$rel" ] || { echo "mount source $t/$rel resolves to $r through a symlink" >&2; exit 4; }
done`

// checkMountSources refuses a container whose in-tree bind sources (a worker's dir, the
// manager's read_only paths) are symlinks now. The agents can write the tree: a manager
// that swaps a worker's dir, or a read_only path, for a link to the run user's runtime dir
// would otherwise hand that directory (podman's socket included) to a container at its
// next start. One guest call, made only when a container is about to start.
func (in *Instance) checkMountSources(ctx context.Context, ct jail.Container) error {
	tree := strings.TrimSuffix(in.TreeSrc, "/")
	var rels []string
	for _, m := range ct.Mounts {
		if rel, ok := strings.CutPrefix(m.Source, tree+"/"); ok {
			rels = append(rels, rel)
		}
	}
	if len(rels) == 0 {
		return nil
	}
	argv := append([]string{"/bin/sh", "-c", checkMountSourcesScript, "sh", tree}, rels...)
	res, err := in.Runner.Run(ctx, guest.Cmd{As: guest.Root, Argv: argv})
	if err != nil {
		return fmt.Errorf("checking bind-mount sources in the tree: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("refused: %s", strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, " | ")
}

// helperArgv runs a guest-side helper mode (guestside.ModeEnrol, ModeProbe) with the lev
// New chose for the guest's architecture; without one it fails with New's reason.
func (in *Instance) helperArgv(mode string) ([]string, []byte, error) {
	if in.levErr != nil {
		return nil, nil, in.levErr
	}
	return guestside.Argv(in.levBin, in.InPlace, mode)
}
