package bringup

import (
	"context"

	"github.com/lever-jail/lever/internal/guest"
)

// The optional abilities a backend may have, each a named interface: bring-up asks for
// an ability by its name, never for a backend's concrete type.

// SocketForwarder is what a VM backend implements so lever can reach the run user's
// podman REST socket from the host: forward a guest unix socket to a host unix socket
// (Lima: `ssh -O forward -L host:guest` over the ControlMaster it already keeps), and say
// so idempotently.
type SocketForwarder interface {
	ForwardSocket(ctx context.Context, guestPath, hostPath string) error
}

// RunUserNamer is a backend whose guest already has its run user (Lima's default user,
// the netns substrate's configured one); otherwise provisioning makes "lever".
type RunUserNamer interface {
	RunUser() string
}

// HostSharer is a backend whose guest shares the host's filesystem and users (the netns
// substrate): the tree is the host path, lever's guest-side files live in the instance's
// state dir, and teardown has host objects (the run user) to remove.
type HostSharer interface {
	SharesHostFilesystem() bool
}

// ManagerDeviceNamer is a backend that names the device nodes the manager container gets
// (Lima: /dev/kvm only under nested_virt); without it nested_virt decides.
type ManagerDeviceNamer interface {
	ManagerDevices() []string
}

// Namespacer is a backend whose guest is a network namespace on the host: teardown stops
// the run user's podman service in it while it still exists.
type Namespacer interface {
	Namespace() string
}

// UpSnapshotter is a backend whose EnsureUp reads the guest in a call of its own after the
// boot (Lima's facts: the tree's mount, the alias, LIMADNS). It takes that reading from the
// egress snapshot req asks for, run as that same call, and returns the snapshot's sections
// (nil when it could not carry it): a cold bring-up's egress step then plans its rebuild
// from them without a snapshot call of its own.
type UpSnapshotter interface {
	EnsureUpWithSnapshot(ctx context.Context, req guest.SnapshotRequest) (guest.Sections, error)
}

// RunUserClaimer is a backend whose run user is a host account that two jails could name
// (the netns substrate): bring-up claims it before starting the guest, and refuses a user
// another jail owns; destroy removes the user only when this jail owns it (owner names
// the jail that does).
type RunUserClaimer interface {
	ClaimRunUser() error
	OwnsRunUser() (owns bool, owner string, err error)
}
