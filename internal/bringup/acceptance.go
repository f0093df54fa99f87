package bringup

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/acceptance"
	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/containers"
)

// podmanView adapts the podman client to what acceptance reads.
type podmanView struct {
	c        *containers.Client
	instance string
}

func (p podmanView) Containers(context.Context) ([]acceptance.ContainerInfo, error) {
	sts, err := p.c.List(p.instance)
	if err != nil {
		return nil, err
	}
	var out []acceptance.ContainerInfo
	for _, s := range sts {
		out = append(out, acceptance.ContainerInfo{Name: s.Name, Running: s.Running, Pid: s.Pid, EffCaps: s.EffCaps, CapAdd: s.CapAdd})
	}
	return out, nil
}

func (p podmanView) Logs(_ context.Context, name string) (string, error) { return p.c.Logs(name) }

// Acceptance runs lever acceptance against this instance: one guest call (the lev helper,
// which takes the egress snapshot and finds lev's containers itself) and podman over its
// socket.
func (in *Instance) Acceptance(ctx context.Context, t acceptance.Targets) (*acceptance.Report, error) {
	in.mustBePrepared("Acceptance")
	if in.levErr != nil {
		return nil, in.levErr
	}
	env := acceptance.Env{
		Instance: in.cfg.Name, Backend: in.b.Name(), Runner: in.Runner, Egress: in.Spec,
		HelperLev: in.levBin, HelperInPlace: in.InPlace, Helper: in.helper,
		RunUser: in.RunUser, ContainerPrefix: strings.TrimSuffix(containers.ContainerName(in.cfg.Name, containers.Manager, ""), "manager"),
		Podman: func(ctx context.Context, uid int) (acceptance.Containers, error) {
			c, err := in.connect(ctx, uid)
			if err != nil {
				return nil, err
			}
			return podmanView{c: c, instance: in.cfg.Name}, nil
		},
		Expect: acceptance.Expect{
			Closed:       in.Spec.Posture == "closed",
			AllowPorts:   in.cfg.Manager.AllowPorts,
			AdminPort:    in.cfg.Broker.AdminPort,
			BrokerAddr:   ":" + strconv.Itoa(in.cfg.Broker.JailPort),
			PidsLimit:    containers.DefaultPidsLimit,
			MemoryMax:    containers.DefaultMemoryBytes,
			DevSubstrate: in.InPlace,
			Targets:      t,
		},
	}
	if ca, err := os.ReadFile(brokerctl.CAPath(in.cfg.StateDir())); err == nil {
		env.BrokerCA = ca
	}
	if p := in.cfg.APIKeyPath(); p != "" {
		if key, err := os.ReadFile(p); err == nil {
			env.Secrets = [][]byte{trimKey(key)}
		}
	}
	if !in.InPlace {
		env.RootOnly = []string{in.treesRoot()}
	}
	if in.InPlace {
		// The netns guest is the host, searched only where the jail's run user keeps
		// things: its home (container storage) and runtime dir.
		if u, err := user.Lookup(in.RunUser); err == nil {
			env.ScanRoots = []string{u.HomeDir, "/run/user/" + u.Uid}
		}
	}
	rep, err := acceptance.Run(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("%w (is the jail of %s up? lever up)", err, in.cfg.Name)
	}
	return rep, nil
}

func trimKey(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
