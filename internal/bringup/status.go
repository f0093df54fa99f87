package bringup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/backend/netns"
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

// RunUserComment marks a run user lever created itself (its passwd comment field), so
// that teardown never deletes a host account lever merely adopted.
const RunUserComment = "lever run user"

// Teardown removes what lever made in a guest that shares the host (the netns
// substrate): the run user's containers and podman service, its storage, the user itself
// with its subordinate ids, and its runtime dir. On a VM the guest's deletion does this.
func (in *Instance) Teardown(ctx context.Context) error {
	if !in.InPlace {
		return nil
	}
	return teardownRunUser(ctx, in.Runner, in.RunUser, nsName(in))
}

// TeardownInPlace is Teardown for `lever destroy`, which must work without a lev binary
// or a loadable tree: it needs only the backend. Backends whose guest has its own
// filesystem have nothing to remove here.
func TeardownInPlace(ctx context.Context, b backend.Backend) error {
	r, ok := b.Runner().(*netns.Runner)
	if !ok {
		return nil
	}
	user := "lever"
	if r.RunUser != "" {
		user = r.RunUser
	}
	ns := ""
	if n, ok := b.(interface{ Namespace() string }); ok {
		ns = n.Namespace()
	}
	return teardownRunUser(ctx, r, user, ns)
}

func teardownRunUser(ctx context.Context, r guest.Runner, user, ns string) error {
	ent, err := exec.CommandContext(ctx, "getent", "passwd", user).Output()
	if err != nil {
		return nil // no run user: nothing to remove
	}
	fields := strings.Split(strings.TrimSpace(string(ent)), ":")
	if len(fields) < 5 || fields[4] != RunUserComment {
		// Not made by lever (provision.sh sets the comment): leave the account and its
		// podman state alone rather than wipe somebody's user.
		return fmt.Errorf("run user %s was not created by lever (passwd comment %q); leaving it and its containers in place", user, fieldOr(fields, 4))
	}
	uid, _ := strconv.Atoi(fields[2])
	if ns != "" {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			jail.StopService(ctx, r, uid)
		}
	}
	// podman's storage holds files owned by subordinate ids; podman itself removes them.
	exec.CommandContext(ctx, "runuser", "-u", user, "--", "env", "XDG_RUNTIME_DIR=/run/user/"+strconv.Itoa(uid), "podman", "system", "reset", "--force").Run()
	exec.CommandContext(ctx, "pkill", "-KILL", "-u", user).Run()
	if out, err := exec.CommandContext(ctx, "userdel", "--remove", user).CombinedOutput(); err != nil {
		return fmt.Errorf("removing run user %s: %v: %s", user, err, out)
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		data, err := os.ReadFile(f)
		if err != nil || !strings.Contains("\n"+string(data), "\n"+user+":") {
			continue // userdel removed it (a rewrite would race other writers)
		}
		var keep []string
		for _, l := range strings.Split(string(data), "\n") {
			if l != "" && !strings.HasPrefix(l, user+":") {
				keep = append(keep, l+"\n")
			}
		}
		if err := os.WriteFile(f, []byte(strings.Join(keep, "")), 0o644); err != nil {
			return fmt.Errorf("removing %s's range from %s: %w", user, f, err)
		}
	}
	if err := os.RemoveAll("/run/user/" + strconv.Itoa(uid)); err != nil {
		return fmt.Errorf("removing run user's runtime dir: %w", err)
	}
	return nil
}

func fieldOr(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
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
