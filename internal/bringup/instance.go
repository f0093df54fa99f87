package bringup

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/levimage"
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
	// Podman reaches the run user's podman from the host; nil: its REST socket (forwarded
	// from a VM guest). Unit tests give a fake.
	Podman Dialer
	// Broker controls the instance's host broker; nil: brokerctl on the state dir, the
	// child being Exe. Unit tests give a fake.
	Broker BrokerControl
}

// Instance is a configured jail with everything derived from its config and backend.
// New derives it without I/O; Prepare adds what bring-up reads from the host (the user's
// lev settings, lev's binary and image, digests); Load is both. Nothing on it changes
// after that: what the steps find on the way (the run user's uid, the alias, the image
// refs, the podman connection) is a Facts value the steps return and hand on.
type Instance struct {
	opts    Options
	cfg     *config.Config
	b       backend.Backend
	Runner  *guest.Counting
	Spec    guest.EgressSpec
	RunUser string
	InPlace bool // the guest sees the host's filesystem (netns substrate)
	TreeSrc string
	provP   provision.Params
	// imageRef is the lev image as configured or built (a tarball's loaded name is a
	// fact of the image step).
	imageRef string
	source   levimage.Source
	// settings are the user's lev settings (lev.config, lev.agents, lev.policy), read and
	// validated on the host by New; settingsHash is their Hash.
	settings     *levsettings.Bundle
	settingsHash string
	// levBin/levDigest are the lev binary layered into the workbench.
	levBin    string
	levDigest string
	// helper runs lev's guest-side modes with levBin (shared by the steps' copies of the
	// Instance, so lev is installed in a VM guest once per bring-up at most).
	helper *guestside.Helper
	levErr error
	// tarballDigest is lev.base_tarball's digest (tarballErr: why there is none).
	tarballDigest string
	tarballErr    error
	podman        Dialer
	broker        BrokerControl
	// protection is what bring-up mounts read-only for the agents (containers.go).
	protection *protection
	// prepared: Prepare has run (the fields above it read from the host are set).
	prepared bool
}

// New derives an Instance from the config and the backend alone: it reads no file, calls
// neither the guest nor the backend, and builds nothing. That is all the commands that
// attach to a running jail need (Attach: lever run, logs, ps, shell); bring-up, its plan,
// status and acceptance need Prepare too (Load).
func New(o Options) (*Instance, error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	in := &Instance{opts: o, cfg: o.Cfg, b: o.Backend, Runner: &guest.Counting{Inner: o.Backend.Runner()}}
	// Every snapshot of this instance also runs the backend's in-guest containment check.
	in.Spec = backend.Guard(o.Backend, guest.SpecFor(o.Cfg, o.Backend.HostAlias()))
	in.Spec.RoundTrips = guest.FileRoundTrips{Path: filepath.Join(o.Cfg.StateDir(), "guest", "nft-roundtrip")}
	in.RunUser = "lever"
	// A backend whose guest already has its run user (Lima's default user, the netns
	// substrate's configured one) names it.
	if n, ok := o.Backend.(RunUserNamer); ok && n.RunUser() != "" {
		in.RunUser = n.RunUser()
	}
	if h, ok := o.Backend.(HostSharer); ok && h.SharesHostFilesystem() {
		in.InPlace = true
	}
	in.TreeSrc = containers.TreeDir
	in.provP = provision.Params{RunUser: in.RunUser, SysctlFile: "/etc/sysctl.d/60-lever.conf"}
	if in.InPlace {
		// The netns guest is the host: its tree is the host path, and lever writes no
		// persistent host file outside the instance's state dir.
		in.TreeSrc = o.Cfg.TreePath
		in.provP.Stamp = filepath.Join(o.Cfg.StateDir(), "guest", "provision.stamp")
		in.provP.SysctlFile = ""
	}
	in.podman, in.broker = o.Podman, o.Broker
	if in.podman == nil {
		in.podman = socketDialer{in: in}
	}
	if in.broker == nil {
		in.broker = hostBroker{in: in}
	}
	return in, nil
}

// mustBePrepared stops a caller that skipped Prepare: without it the plan, the image refs
// and the settings' digest are empty, and a plan or bring-up from them would be wrong, not
// merely slow. Only Attach (and Observe under it) works on an Instance from New alone.
func (in *Instance) mustBePrepared(what string) {
	if !in.prepared {
		panic("bringup: " + what + " on an Instance that was not prepared (use Load, or Prepare after New)")
	}
}

// Load is New and Prepare: the Instance bring-up, its plan, status and acceptance use.
func Load(ctx context.Context, o Options) (*Instance, error) {
	in, err := New(o)
	if err != nil {
		return nil, err
	}
	if err := in.Prepare(ctx); err != nil {
		return nil, err
	}
	return in, nil
}

// Prepare reads what bring-up needs from the host, once: the user's lev settings (checked
// with lev's own loaders, so a bad file fails before any step runs and changes nothing),
// the guest's architecture, the static Linux lev for it and the lev image made from it,
// their digests, and what in the tree is mounted read-only for the agents. A lev that
// cannot be found is not an error here: the steps that need it say why.
func (in *Instance) Prepare(ctx context.Context) error {
	if in.prepared {
		return nil
	}
	o := in.opts
	// The user's lev settings are checked here, before any step runs, with lev's own
	// loaders: a bad file fails up and apply --dry-run alike and changes nothing.
	bundle, err := levsettings.Load(levsettings.Paths{Config: o.Cfg.Lev.Config, Agents: o.Cfg.Lev.Agents, Policy: o.Cfg.Lev.Policy})
	if err != nil {
		return err
	}
	in.settings, in.settingsHash = bundle, bundle.Hash()
	// One Linux lev, for the guest's architecture, goes into the lev image and the
	// workbench and serves the guest-side helpers (lev __guest): the host's own executable
	// never enters the guest (a Mac's lever could not run there).
	arch, archErr := backend.GuestArch(ctx, o.Backend)
	src, err := levimage.Resolve(o.Cfg, o.LevBinary, arch)
	if err != nil {
		if archErr != nil {
			return archErr
		}
		return err
	}
	in.source = src
	switch src.Kind {
	case levimage.Built:
		im, err := levimage.Build(levimage.Spec{LevBinary: src.Path, Arch: arch})
		if err != nil {
			return err
		}
		in.imageRef = im.Ref
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
	if in.levErr == nil {
		in.helper = &guestside.Helper{Lev: in.levBin, InPlace: in.InPlace, Digest: in.levDigest}
	}
	if in.levErr != nil {
		in.levErr = fmt.Errorf("the guest-side helpers and the workbench need a static Linux lev for the guest: %w", in.levErr)
	}
	in.protection = &protection{}
	in.protection.paths, in.protection.err = protectedIn(o.Cfg)
	if o.Cfg.Lev.BaseTarball != "" {
		if in.tarballDigest, in.tarballErr = levimage.FileDigest(o.Cfg.Lev.BaseTarball); in.tarballErr != nil {
			in.tarballErr = fmt.Errorf("lev.base_tarball: %w", in.tarballErr)
		}
	}
	in.prepared = true
	return nil
}

// Agents are the enrolment dir names: manager, worker-<name>...
// Config is the lever.yaml the instance was made from.
func (in *Instance) Config() *config.Config { return in.cfg }

func (in *Instance) Agents() []string {
	out := []string{containers.AgentDir(containers.Manager, "")}
	for _, w := range in.cfg.Workers {
		out = append(out, containers.AgentDir(containers.Worker, w.Name))
	}
	return out
}

func agentsRoot(uid int) string {
	return fmt.Sprintf("/run/user/%d/lever/agents", uid)
}

// benchRoot holds each agent's exec-channel dir (run user's tmpfs, like agentsRoot).
func benchRoot(uid int) string {
	return fmt.Sprintf("/run/user/%d/lever/bench", uid)
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
