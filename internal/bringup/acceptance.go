package bringup

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/lever-jail/lever/internal/acceptance"
	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/jail"
)

// podmanView adapts the podman client to what acceptance reads.
type podmanView struct {
	c        *jail.Client
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

// Acceptance runs lever acceptance against this instance.
func (in *Instance) Acceptance(ctx context.Context, t acceptance.Targets) (*acceptance.Report, error) {
	obs := in.Observe(ctx)
	if !obs.GuestReachable {
		return nil, fmt.Errorf("guest of %s is not reachable: run lever up first", in.cfg.Name)
	}
	env := acceptance.Env{
		Instance: in.cfg.Name, Backend: in.b.Name(), Runner: in.Runner, Egress: in.Spec,
		ProbeExe: in.opts.Exe, ProbeInPlace: in.InPlace,
		Expect: acceptance.Expect{
			Closed:       in.Spec.Posture == "closed",
			AllowPorts:   in.cfg.Manager.AllowPorts,
			AdminPort:    in.cfg.Broker.AdminPort,
			BrokerAddr:   ":" + strconv.Itoa(in.cfg.Broker.JailPort),
			PidsLimit:    jail.DefaultPidsLimit,
			MemoryMax:    jail.DefaultMemoryBytes,
			DevSubstrate: in.InPlace,
			Targets:      t,
		},
	}
	if ca, err := os.ReadFile(brokerctl.CAPath(in.cfg.StateDir())); err == nil {
		env.BrokerCA = ca
	}
	if in.cfg.Broker.APIKeyPath != "" {
		if key, err := os.ReadFile(in.cfg.Broker.APIKeyPath); err == nil {
			env.Secrets = [][]byte{trimKey(key)}
		}
	}
	if obs.ServiceUp {
		if c, err := in.connect(ctx, obs.Facts.UID); err == nil {
			env.Containers = podmanView{c: c, instance: in.cfg.Name}
		}
	}
	return acceptance.Run(ctx, env)
}

func trimKey(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
