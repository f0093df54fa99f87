package bringup

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl"
)

// BrokerControl runs the instance's broker on the host (brokerctl on the state dir; a
// fake in unit tests).
type BrokerControl interface {
	Status() (*brokerctl.BrokerStatus, error)
	// Start runs the broker with a certificate naming ips (the alias addresses, comma
	// separated) and returns once it listens.
	Start(ctx context.Context, ips string) (*brokerctl.BrokerStatus, error)
	Stop(ctx context.Context) error
}

// hostBroker is the real BrokerControl: `lever broker serve` as a detached child.
type hostBroker struct{ in *Instance }

func (h hostBroker) Status() (*brokerctl.BrokerStatus, error) {
	return brokerctl.Status(h.in.cfg.StateDir())
}

func (h hostBroker) Start(ctx context.Context, ips string) (*brokerctl.BrokerStatus, error) {
	env := append(os.Environ(), brokerctl.EnvAliasIP+"="+ips)
	env = append(env, h.in.opts.BrokerEnv...)
	return brokerctl.Start(ctx, h.in.cfg.StateDir(), brokerctl.StartOptions{Argv: []string{h.in.opts.Exe, "broker", "serve", "-c", h.in.cfg.Path}, Env: env})
}

func (h hostBroker) Stop(ctx context.Context) error {
	_, err := brokerctl.Stop(ctx, h.in.cfg.StateDir(), 10*time.Second)
	return err
}

// brokerStep: the broker runs with a certificate naming the alias. Skipped when it runs
// and its certificate names the alias the egress step verified.
var brokerStep = Step{
	ID:    StepBroker,
	Needs: []Fact{FactAliasV4, FactAliasV6},
	Gives: []Fact{FactBroker},
	Plan: func(p PlanInput) (Action, string) {
		switch o := p.Obs; {
		case o.BrokerRunning && o.BrokerSANOK:
			return ActionKeep, "running, certificate names the alias IP"
		case o.BrokerRunning:
			return ActionRepair, "running without the alias IP in its certificate: restart"
		default:
			return ActionStart, "not running"
		}
	},
	Run: func(ctx context.Context, in *Instance, _ Observed, f Facts) (Done, error) {
		bs, err := in.broker.Status()
		if err != nil {
			return Done{Facts: f}, err
		}
		if bs.Running && bs.State != nil && contains(bs.State.SANIPs, f.AliasV4) {
			f.Broker = bs.State.Listen
			return Done{Detail: fmt.Sprintf("running (pid %d), certificate for %s until %s", bs.PID, f.AliasV4, bs.State.ServerCertNotAfter.Format(time.RFC3339)), Facts: f}, nil
		}
		what := "started"
		if bs.Running {
			if err := in.broker.Stop(ctx); err != nil {
				return Done{Facts: f}, err
			}
			what = "restarted (its certificate did not name " + f.AliasV4 + ")"
		}
		ips := f.AliasV4
		if f.AliasV6 != "" {
			ips += "," + f.AliasV6
		}
		bs, err = in.broker.Start(ctx, ips)
		if err != nil {
			return Done{Facts: f}, fmt.Errorf("starting the broker: %w", err)
		}
		listen := ""
		if bs.State != nil {
			listen = bs.State.Listen
		}
		f.Broker = listen
		return Done{Changed: true, Detail: fmt.Sprintf("%s (pid %d) on %s", what, bs.PID, listen), Facts: f}, nil
	},
}

func (in *Instance) brokerURL(f Facts) string {
	return "https://" + net.JoinHostPort(f.AliasV4, strconv.Itoa(in.cfg.Broker.JailPort))
}
