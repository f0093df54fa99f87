package bringup

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestNewReadsNothing: New derives an Instance without reading a file or calling the guest,
// so the commands that attach to a running jail (lever run, logs, ps, shell: Attach over
// Observe) work from it alone, while Load (New and Prepare) reads the user's lev settings
// and lev's binary. Here neither exists: New and the attach observation succeed with one
// guest call and the jail seen running; Load fails naming the settings file (the control
// that the same config does hit the missing files once prepared).
func TestNewReadsNothing(t *testing.T) {
	j := healthyJail(t)
	cfg := *j.in.cfg
	missing := filepath.Join(t.TempDir(), "no-such-config.toml")
	cfg.Lev.Config = missing
	o := Options{Cfg: &cfg, Backend: j.be, Exe: "/nonexistent/lever", LevBinary: "/nonexistent/lev", Podman: j.pod, Broker: j.broker}
	before := len(j.r.Calls())
	in, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if n := len(j.r.Calls()) - before; n != 0 {
		t.Fatalf("New made %d guest calls", n)
	}
	if in.prepared || in.imageRef != "" || in.settingsHash != "" || in.helper != nil {
		t.Fatalf("New prepared the instance: image %q, settings %q", in.imageRef, in.settingsHash)
	}
	obs := in.Observe(context.Background())
	if n := len(j.r.Calls()) - before; n != 1 {
		t.Errorf("the attach observation made %d guest calls, want 1", n)
	}
	if !obs.GuestReachable || !obs.ServiceUp {
		t.Fatalf("observation from New: reachable %v, service %v", obs.GuestReachable, obs.ServiceUp)
	}
	for _, name := range in.LevContainers() {
		if obs.Containers[name] != ContainerRunning {
			t.Errorf("%s: %q, want running", name, obs.Containers[name])
		}
	}
	if _, err := Load(context.Background(), o); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Load with a missing lev.config: %v, want an error naming %s", err, missing)
	}
	defer func() {
		if recover() == nil {
			t.Error("Plan on an Instance from New alone did not stop")
		}
	}()
	in.Plan(obs)
}
