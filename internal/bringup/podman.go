package bringup

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lever-jail/lever/internal/jail"
)

// Images is what the image step asks of the run user's podman.
type Images interface {
	ImageExists(ref string) (bool, error)
	Image(ref string) (*jail.ImageInfo, error)
	LoadArchive(archive []byte) ([]string, error)
	LayerLev(baseID, ref, levBinary string, entrypoint, cmd []string, labels map[string]string, log io.Writer) error
}

// Podman is the run user's podman as the steps use it (jail.Client over its REST socket;
// a fake in unit tests).
type Podman interface {
	Images
	List(instance string) ([]jail.State, error)
	// EnsureContainer is jail.Client.Ensure with beforeStart run right before a
	// container is created or started.
	EnsureContainer(ct jail.Container, fresh bool, beforeStart func(jail.Container) error) (jail.Change, error)
	Inspect(name string) (*jail.State, error)
	Logs(name string) (string, error)
}

// Dialer reaches the run user (uid)'s podman from the host.
type Dialer interface {
	Dial(ctx context.Context, uid int) (Podman, error)
}

// podmanClient adapts jail.Client to Podman.
type podmanClient struct{ *jail.Client }

func (p podmanClient) EnsureContainer(ct jail.Container, fresh bool, beforeStart func(jail.Container) error) (jail.Change, error) {
	p.Client.BeforeStart = beforeStart
	return p.Client.Ensure(ct, fresh)
}

// socketDialer connects to the run user's podman socket: in place on the netns substrate,
// forwarded to the host by a SocketForwarder otherwise.
type socketDialer struct{ in *Instance }

func (d socketDialer) Dial(ctx context.Context, uid int) (Podman, error) {
	c, err := d.in.connect(ctx, uid)
	if err != nil {
		return nil, err
	}
	return podmanClient{c}, nil
}

func (in *Instance) socketURI(ctx context.Context, uid int) (string, error) {
	if in.InPlace {
		return "unix://" + jail.SocketPath(uid), nil
	}
	f, ok := in.b.(SocketForwarder)
	if !ok {
		return "", fmt.Errorf("backend %s cannot forward the guest's podman socket to the host (it does not implement bringup.SocketForwarder)", in.b.Name())
	}
	host := filepath.Join(in.cfg.StateDir(), "podman.sock")
	if err := os.MkdirAll(filepath.Dir(host), 0o700); err != nil {
		return "", err
	}
	if err := f.ForwardSocket(ctx, jail.SocketPath(uid), host); err != nil {
		return "", fmt.Errorf("forwarding the guest's podman socket: %w", err)
	}
	return "unix://" + host, nil
}

// connect opens the run user's podman REST socket (the host commands attach through it).
func (in *Instance) connect(ctx context.Context, uid int) (*jail.Client, error) {
	if uid <= 0 {
		return nil, fmt.Errorf("the run user %s has no uid yet (is the guest provisioned?)", in.RunUser)
	}
	uri, err := in.socketURI(ctx, uid)
	if err != nil {
		return nil, err
	}
	return jail.Connect(ctx, uri)
}
