// Package backend defines the containment backends lever can build a jail on, and the
// guarantee matrix each one is judged by.
package backend

import (
	"context"

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
