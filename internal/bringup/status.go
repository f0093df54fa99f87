package bringup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/jail"
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
	Containers []jail.State `json:"containers"`
	Healthy    bool         `json:"healthy"`
}

// Status reads everything without changing anything.
func (in *Instance) Status(ctx context.Context) *Status {
	s := &Status{Instance: in.cfg.Name, Backend: in.b.Name()}
	s.Guest.RunUser = in.RunUser
	s.Egress.Posture = string(in.Spec.Posture)
	obs, _ := in.Observe(ctx)
	s.Guest.Reachable, s.Guest.Provisioned, s.Guest.PodmanUp = obs.GuestReachable, obs.StampCurrent, obs.ServiceUp
	if obs.GuestReachable {
		rep, err := guest.VerifyEgress(ctx, in.Runner, in.Spec)
		if err != nil {
			s.Egress.Error = err.Error()
		} else {
			s.Egress.Verified = rep.Diff.Match()
			s.Egress.Differences = rep.Lines
			s.Egress.AliasV4 = rep.Desired.AliasV4
		}
	}
	if bs, err := brokerctl.Status(in.cfg.StateDir()); err == nil && bs.Running {
		s.Broker.Running, s.Broker.PID = true, bs.PID
		if bs.State != nil {
			s.Broker.Listen = bs.State.Listen
			s.Broker.CertNotAfter = bs.State.ServerCertNotAfter
			s.Broker.CertExpiresIn = time.Until(bs.State.ServerCertNotAfter).Round(time.Minute).String()
		}
	}
	if obs.ServiceUp {
		if c, err := in.connect(ctx); err == nil {
			s.Containers, _ = c.List(in.cfg.Name)
		}
	}
	s.Healthy = s.Guest.Reachable && s.Guest.PodmanUp && s.Egress.Verified && s.Broker.Running && len(s.Containers) > 0
	for _, c := range s.Containers {
		s.Healthy = s.Healthy && c.Running
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
	}
	return b.String()
}

// Teardown removes what lever made in a guest that shares the host (the netns
// substrate): the run user's containers and podman service, its storage, the user itself
// with its subordinate ids, and its runtime dir. On a VM the guest's deletion does this.
// `lever destroy` should call it before deleting the guest.
func (in *Instance) Teardown(ctx context.Context) error {
	if !in.InPlace {
		return nil
	}
	uidOut, err := exec.CommandContext(ctx, "id", "-u", in.RunUser).Output()
	if err != nil {
		return nil // no run user: nothing to remove
	}
	uid, _ := strconv.Atoi(strings.TrimSpace(string(uidOut)))
	if _, err := os.Stat("/run/netns/" + nsName(in)); err == nil {
		jail.StopService(ctx, in.Runner, uid)
	}
	// podman's storage holds files owned by subordinate ids; podman itself removes them.
	exec.CommandContext(ctx, "runuser", "-u", in.RunUser, "--", "env", "XDG_RUNTIME_DIR=/run/user/"+strconv.Itoa(uid), "podman", "system", "reset", "--force").Run()
	exec.CommandContext(ctx, "pkill", "-KILL", "-u", in.RunUser).Run()
	if out, err := exec.CommandContext(ctx, "userdel", "--remove", in.RunUser).CombinedOutput(); err != nil {
		return fmt.Errorf("removing run user %s: %v: %s", in.RunUser, err, out)
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		if b, _ := os.ReadFile(f); !strings.Contains("\n"+string(b), "\n"+in.RunUser+":") {
			continue // userdel removed it (a rewrite would race other writers)
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var keep []string
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" && !strings.HasPrefix(l, in.RunUser+":") {
				keep = append(keep, l+"\n")
			}
		}
		os.WriteFile(f, []byte(strings.Join(keep, "")), 0o644)
	}
	os.RemoveAll("/run/user/" + strconv.Itoa(uid))
	return nil
}

func nsName(in *Instance) string {
	if r, ok := in.b.Runner().(interface{ NamespaceName() string }); ok {
		return r.NamespaceName()
	}
	type nsr interface{ Namespace() string }
	if b, ok := in.b.(nsr); ok {
		return b.Namespace()
	}
	return ""
}
