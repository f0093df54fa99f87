// Package backend defines the containment backends lever can build a jail on, and the
// guarantee matrix each one is judged by. It owns the Backend interface, the registry,
// the optional abilities (containment check, architecture) and the matrix's rows.
//
// It and its backends make the guest exist and hand out its guest.Runner; they must not
// decide what runs in the guest (bring-up does) or what the firewall holds (egress), and
// must not import internal/bringup, internal/cli or the podman bindings.
package backend

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
)

// Backend is one way to provide the jail.
type Backend interface {
	// Name is the value of lever.yaml's backend key that selects this backend.
	Name() string
	// EnsureUp creates or starts the guest so that Runner works. It is idempotent.
	EnsureUp(ctx context.Context) error
	// Stop powers the guest off and keeps its disk.
	Stop(ctx context.Context) error
	// Destroy removes the guest and every host-side file lever made for it.
	Destroy(ctx context.Context) error
	// Runner is the single seam for commands inside the guest.
	Runner() guest.Runner
	// HostAlias is the name the guest resolves to reach the host's loopback services
	// (host.orb.internal, host.lima.internal, ...). Resolution happens inside the guest.
	HostAlias() string
	// Profile is the backend's row in the containment matrix.
	Profile() Profile
}

// Profile states what a backend guarantees, for `lever backends`.
type Profile struct {
	Name               string   `json:"name"`
	HypervisorBoundary bool     `json:"hypervisor_boundary"` // guarantee 0
	Kernel             string   `json:"kernel"`              // "separate from host" or "shared with host"
	FilesystemBound    string   `json:"filesystem_bound"`
	EgressEnforced     string   `json:"egress_enforced"`
	RootlessRuntime    string   `json:"rootless_runtime"`
	Caveats            []string `json:"caveats"`
}

// Availability says whether a backend can be used on this host right now.
type Availability struct {
	Usable  bool   `json:"usable"`
	Tool    string `json:"tool,omitempty"`    // the binary it drives, as found on PATH
	Version string `json:"version,omitempty"` // that binary's version
	Reason  string `json:"reason,omitempty"`  // why not, when not usable
	// Accelerator is the VM accelerator the backend would use on this host (lima: kvm, tcg,
	// vz or hvf), and AcceleratorWhy the reason, as probed for the user running lever.
	Accelerator    string `json:"accelerator,omitempty"`
	AcceleratorWhy string `json:"accelerator_reason,omitempty"`
}

// Descriptor is what a backend package registers: its matrix row, a probe of the host,
// and a constructor from lever.yaml.
type Descriptor struct {
	Profile Profile
	Probe   func(ctx context.Context) Availability
	New     func(cfg *config.Config) (Backend, error)
}

var registry = map[string]Descriptor{}

// Register adds a backend. Backend packages call it from init; internal/backend/all
// imports every one of them, so importing that package yields the complete set.
func Register(d Descriptor) {
	if _, dup := registry[d.Profile.Name]; dup {
		panic("backend registered twice: " + d.Profile.Name)
	}
	registry[d.Profile.Name] = d
}

// Lookup returns the registered backend named name.
func Lookup(name string) (Descriptor, bool) {
	d, ok := registry[name]
	return d, ok
}

// All returns every registered backend, sorted by name.
func All() []Descriptor {
	out := make([]Descriptor, 0, len(registry))
	for _, d := range registry {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Profile.Name < out[j].Profile.Name })
	return out
}

// New builds the backend cfg selects. An unknown name is refused, never substituted.
func New(cfg *config.Config) (Backend, error) {
	d, ok := registry[cfg.Backend]
	if !ok {
		return nil, fmt.Errorf("backend %q is not implemented (known: %s)", cfg.Backend, strings.Join(names(), ", "))
	}
	return d.New(cfg)
}

func names() []string {
	var n []string
	for _, d := range All() {
		n = append(n, d.Profile.Name)
	}
	return n
}

// ArchReporter is a backend that knows its guest's architecture without a guest call (from
// what it configured: Lima's rendered template, OrbStack's machine, the host itself for
// netns). The answer uses GOARCH spelling ("amd64", "arm64"); lever picks the Linux lev
// binary for it, which serves the guest-side helpers and goes into the images.
type ArchReporter interface {
	GuestArch(ctx context.Context) (string, error)
}

// GuestArch is b's guest architecture: what an ArchReporter says; for a backend that does
// not report one, the host's when the host is Linux (a guest on a Linux host without its
// own report is the host's kind), else an error: a guess could send a binary the guest cannot run.
func GuestArch(ctx context.Context, b Backend) (string, error) {
	return guestArch(ctx, b, runtime.GOOS, runtime.GOARCH)
}

func guestArch(ctx context.Context, b Backend, hostOS, hostArch string) (string, error) {
	if r, ok := b.(ArchReporter); ok {
		a, err := r.GuestArch(ctx)
		if err != nil {
			return "", fmt.Errorf("%s backend: the guest's architecture: %w", b.Name(), err)
		}
		return a, nil
	}
	if hostOS == "linux" {
		return hostArch, nil
	}
	return "", fmt.Errorf("%s backend does not report its guest's architecture, and on a %s host lever cannot assume the guest is %s: it needs the backend to say", b.Name(), hostOS, hostArch)
}

// Containment is what a backend re-checks on EVERY apply and up, warm or cold: a guest
// that is already running is not trusted because it was checked when it started (a global
// Lima override, a mount added in the guest, an OrbStack machine's isolation turned off
// all happen to running guests).
type Containment interface {
	// CheckHost runs the host-side checks (Lima: the realized config from
	// `limactl list --json`; OrbStack: `orb list` isolation). No guest call.
	CheckHost(ctx context.Context) error
	// GuestCheck is a read-only part of a guest.Script (an embedded file in the backend's
	// scripts/), run as root; it answers in sections named guest.ContainmentPrefix+....
	// Bring-up runs it inside its egress snapshot call, so checking costs no extra
	// round-trip.
	GuestCheck() string
	// CheckGuest judges GuestCheck's sections; its error names the drift.
	CheckGuest(guest.Sections) error
}

// Guard adds b's in-guest containment check, when it has one, to an egress spec: the
// check then rides in the spec's snapshot call, and a drift is refused before anything in
// the guest changes.
func Guard(b Backend, s guest.EgressSpec) guest.EgressSpec {
	if c, ok := b.(Containment); ok {
		s.Containment, s.CheckContainment = c.GuestCheck(), c.CheckGuest
	}
	return s
}
