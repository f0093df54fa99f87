package bringup

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/containers"
)

// Status is lever status: backend and guest, egress, broker, containers.
type Status struct {
	Instance string `json:"instance"`
	Backend  string `json:"backend"`
	Guest    struct {
		Reachable    bool   `json:"reachable"`
		Provisioned  bool   `json:"provisioned"`
		RunUser      string `json:"run_user"`
		PodmanUp     bool   `json:"podman_service_up"`
		ProvisionMsg string `json:"provision,omitempty"`
	} `json:"guest"`
	Egress struct {
		Verified    bool     `json:"verified"`
		Differences []string `json:"differences,omitempty"`
		Error       string   `json:"error,omitempty"`
		AliasV4     string   `json:"alias_v4,omitempty"`
		Posture     string   `json:"posture"`
	} `json:"egress"`
	Broker struct {
		Running       bool      `json:"running"`
		PID           int       `json:"pid,omitempty"`
		Listen        string    `json:"listen,omitempty"`
		CertNotAfter  time.Time `json:"cert_not_after,omitempty"`
		CertExpiresIn string    `json:"cert_expires_in,omitempty"`
	} `json:"broker"`
	Containers []containers.State `json:"containers"`
	// Mounts and Channels are the observation's proofs, by running container: its
	// in-tree mounts, and (a workbench) its exec channel; "" proven, else why not. Absent
	// when the observation could not prove them (MountsError says why).
	Mounts      map[string]string `json:"mounts,omitempty"`
	Channels    map[string]string `json:"channels,omitempty"`
	MountsError string            `json:"mounts_error,omitempty"`
	// TreeWarning: the run user could not write the tree, with the fix (treewrite.go). A
	// warning, not ill health: the jail runs, the agents' writes fail.
	TreeWarning string `json:"tree_warning,omitempty"`
	Healthy     bool   `json:"healthy"`
}

// Status reads everything without changing anything: one guest call (the observation
// with the egress snapshot and the backend's containment check).
func (in *Instance) Status(ctx context.Context) *Status {
	return in.statusFrom(in.ObserveWithEgress(ctx))
}

// StatusAfter is the status `lever up` prints after res: when the run changed nothing,
// the observation it started from is the state now, so no second guest call is made (a
// warm up stays one call); after a change it observes again.
func (in *Instance) StatusAfter(ctx context.Context, res *Result) *Status {
	if res != nil && !res.Changed && res.obs != nil {
		return in.statusFrom(*res.obs)
	}
	return in.Status(ctx)
}

func (in *Instance) statusFrom(obs Observed) *Status {
	s := &Status{Instance: in.cfg.Name, Backend: in.b.Name()}
	s.Guest.RunUser = in.RunUser
	s.Egress.Posture = string(in.Spec.Posture)
	s.Guest.Reachable, s.Guest.Provisioned, s.Guest.PodmanUp = obs.GuestReachable, obs.StampCurrent, obs.ServiceUp
	s.TreeWarning = in.treeWarning(obs)
	switch {
	case !obs.GuestReachable:
	case obs.EgressErr != nil:
		s.Egress.Error = obs.EgressErr.Error()
	case obs.Egress != nil:
		s.Egress.Verified = obs.Egress.Diff.Match()
		s.Egress.Differences = obs.Egress.Lines
		s.Egress.AliasV4 = obs.Egress.Desired.AliasV4
	}
	if bs, err := in.broker.Status(); err == nil && bs.Running {
		s.Broker.Running, s.Broker.PID = true, bs.PID
		if bs.State != nil {
			s.Broker.Listen = bs.State.Listen
			s.Broker.CertNotAfter = bs.State.ServerCertNotAfter
			s.Broker.CertExpiresIn = time.Until(bs.State.ServerCertNotAfter).Round(time.Minute).String()
		}
	}
	if obs.ServiceUp && obs.Facts.Podman != nil {
		s.Containers, _ = obs.Facts.Podman.List(in.cfg.Name)
	}
	s.Healthy = s.Guest.Reachable && s.Guest.PodmanUp && s.Egress.Verified && s.Broker.Running && len(s.Containers) > 0
	for _, c := range s.Containers {
		s.Healthy = s.Healthy && c.Running
	}
	if obs.MountsAsked {
		s.Mounts, s.Channels = obs.MountProofs, obs.ChannelProofs
		if obs.MountsErr != nil {
			s.MountsError = obs.MountsErr.Error()
		}
		for _, m := range []map[string]string{s.Mounts, s.Channels} {
			for _, why := range m {
				s.Healthy = s.Healthy && why == ""
			}
		}
	}
	return s
}

// Text renders Status for people.
func (s *Status) Text() string {
	var b strings.Builder
	yn := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(&b, "instance %s on %s\n", s.Instance, s.Backend)
	fmt.Fprintf(&b, "guest:   reachable %s, provisioned %s, run user %s, podman service %s\n", yn(s.Guest.Reachable), yn(s.Guest.Provisioned), s.Guest.RunUser, yn(s.Guest.PodmanUp))
	switch {
	case s.Egress.Error != "":
		fmt.Fprintf(&b, "egress:  %s posture, cannot verify: %s\n", s.Egress.Posture, s.Egress.Error)
	case s.Egress.Verified:
		fmt.Fprintf(&b, "egress:  %s posture, verified (alias %s)\n", s.Egress.Posture, s.Egress.AliasV4)
	case !s.Guest.Reachable:
		fmt.Fprintf(&b, "egress:  %s posture, guest not reachable\n", s.Egress.Posture)
	default:
		fmt.Fprintf(&b, "egress:  %s posture, DRIFTED:\n", s.Egress.Posture)
		for _, l := range s.Egress.Differences {
			fmt.Fprintf(&b, "           %s\n", l)
		}
	}
	if s.Broker.Running {
		fmt.Fprintf(&b, "broker:  running (pid %d) on %s, certificate expires %s (in %s)\n", s.Broker.PID, s.Broker.Listen, s.Broker.CertNotAfter.Format(time.RFC3339), s.Broker.CertExpiresIn)
	} else {
		fmt.Fprintf(&b, "broker:  not running\n")
	}
	if len(s.Containers) == 0 {
		fmt.Fprintf(&b, "lev:     no containers\n")
	}
	for _, c := range s.Containers {
		fmt.Fprintf(&b, "lev:     %s %s (%s)\n", c.Name, c.Status, c.Image)
		if why := s.Mounts[c.Name]; why != "" {
			fmt.Fprintf(&b, "           mounts of the tree NOT AS PLANNED (lever up restarts it): %q\n", why)
		}
		if why := s.Channels[c.Name]; why != "" {
			fmt.Fprintf(&b, "           exec channel BROKEN (lever up restarts it): %q\n", why)
		}
	}
	if s.MountsError != "" {
		fmt.Fprintf(&b, "lev:     mounts and exec channels not proven: %q\n", s.MountsError)
	}
	if s.TreeWarning != "" {
		fmt.Fprintf(&b, "tree:    WARNING: %s\n", s.TreeWarning)
	}
	return b.String()
}
