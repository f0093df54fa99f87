package bringup

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/lever-jail/lever/internal/containers"
)

// Images is what the image step asks of the run user's podman.
type Images interface {
	ImageExists(ref string) (bool, error)
	Image(ref string) (*containers.ImageInfo, error)
	LoadArchive(archive []byte) ([]string, error)
	LayerLev(baseID, ref, levBinary string, entrypoint, cmd []string, labels map[string]string, log io.Writer) error
}

// Podman is the run user's podman as the steps use it (containers.Client over its REST socket;
// a fake in unit tests).
type Podman interface {
	Images
	List(instance string) ([]containers.State, error)
	// EnsureContainer is containers.Client.EnsureWith: h's checks run around a start.
	EnsureContainer(ct containers.Container, fresh bool, h containers.StartHooks) (containers.Change, error)
	Inspect(name string) (*containers.State, error)
	Logs(name string) (string, error)
}

// Dialer reaches the run user (uid)'s podman from the host.
type Dialer interface {
	Dial(ctx context.Context, uid int) (Podman, error)
}

// podmanClient adapts containers.Client to Podman.
type podmanClient struct{ *containers.Client }

func (p podmanClient) EnsureContainer(ct containers.Container, fresh bool, h containers.StartHooks) (containers.Change, error) {
	return p.Client.EnsureWith(ct, fresh, h)
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
		return "unix://" + containers.SocketPath(uid), nil
	}
	f, ok := in.b.(SocketForwarder)
	if !ok {
		return "", fmt.Errorf("backend %s cannot forward the guest's podman socket to the host (it does not implement bringup.SocketForwarder)", in.b.Name())
	}
	host := filepath.Join(in.cfg.StateDir(), "podman.sock")
	if err := os.MkdirAll(filepath.Dir(host), 0o700); err != nil {
		return "", err
	}
	if err := f.ForwardSocket(ctx, containers.SocketPath(uid), host); err != nil {
		return "", fmt.Errorf("forwarding the guest's podman socket: %w", err)
	}
	return "unix://" + host, nil
}

// connect opens the run user's podman REST socket (the host commands attach through it).
func (in *Instance) connect(ctx context.Context, uid int) (*containers.Client, error) {
	if uid <= 0 {
		return nil, fmt.Errorf("the run user %s has no uid yet (is the guest provisioned?)", in.RunUser)
	}
	uri, err := in.socketURI(ctx, uid)
	if err != nil {
		return nil, err
	}
	return containers.Connect(ctx, uri)
}
