//go:build e2e

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/testutil"
)

// lever stop and lever destroy through the CLI on the netns substrate, for real: stop
// takes the guest down and keeps host state; destroy leaves no namespace, no veth, no
// /etc/netns file and no state directory, and lists what it removed.
func TestStopDestroyNetnsE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	ctx := context.Background()
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv(netns.PrefixEnv, "lvsd-")
	// destroy removes the netns guest's run user: name one of this test's own, so that it
	// never deletes the shared default user ("lever") under a bring-up test running in
	// another package at the same time.
	t.Setenv(netns.RunUserEnv, fmt.Sprintf("lvsd%d", os.Getpid()))
	t.Setenv("LEVER_STATE_DIR", t.TempDir())
	proj := t.TempDir()
	name := fmt.Sprintf("sd%d", os.Getpid())
	cfgPath := filepath.Join(proj, "lever.yaml")
	testutil.LeverYAML{Name: name, Backend: "netns", Broker: testutil.YAMLBroker{LLMAuth: "subscription"}}.Write(t, cfgPath)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	b, err := backend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nb := b.(*netns.Backend)
	t.Cleanup(func() { _ = b.Destroy(context.Background()) })
	nsPath := filepath.Join("/run/netns", nb.Namespace())
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	vethExists := func() bool { return exec.Command("ip", "link", "show", nb.HostVeth()).Run() == nil }

	if err := b.EnsureUp(ctx); err != nil {
		t.Fatal(err)
	}
	if !exists(nsPath) || !vethExists() {
		t.Fatalf("bring-up made no namespace/veth")
	}
	state := filepath.Join(cfg.StateDir(), "ca", "ca.key")
	os.MkdirAll(filepath.Dir(state), 0o700)
	os.WriteFile(state, []byte("k"), 0o600)

	run := func(args ...string) bringup.Lifecycle {
		t.Helper()
		var out, errw bytes.Buffer
		if code := Main(append(args, "--json", "-c", cfgPath), &out, &errw); code != 0 {
			t.Fatalf("lever %v: exit %d: %s", args, code, errw.String())
		}
		var lo bringup.Lifecycle
		if err := json.Unmarshal(out.Bytes(), &lo); err != nil {
			t.Fatalf("lever %v: %v: %s", args, err, out.String())
		}
		return lo
	}

	if lo := run("stop"); lo.GuestAction != "stopped" || lo.Backend != "netns" {
		t.Errorf("stop reported %+v", lo)
	}
	if exists(nsPath) || vethExists() {
		t.Errorf("after stop the namespace or veth is still there")
	}
	if !exists(state) {
		t.Errorf("stop removed host state")
	}

	// Up again, then destroy everything.
	if err := b.EnsureUp(ctx); err != nil {
		t.Fatal(err)
	}
	lo := run("destroy")
	if !lo.StateRemoved || fmt.Sprint(lo.Removed) != "[ca ca/ca.key]" {
		t.Errorf("destroy reported %+v", lo)
	}
	for _, p := range []string{nsPath, nb.EtcDir(), cfg.StateDir()} {
		if exists(p) {
			t.Errorf("after destroy %s still exists", p)
		}
	}
	if vethExists() {
		t.Errorf("after destroy veth %s still exists", nb.HostVeth())
	}
	if _, err := os.Stat(cfgPath); err != nil {
		t.Errorf("destroy touched the project: %v", err)
	}
	// Destroying a destroyed instance succeeds and removes nothing.
	if lo := run("destroy"); lo.StateRemoved || len(lo.Removed) != 0 {
		t.Errorf("second destroy reported %+v", lo)
	}
	if _, err := os.Stat(nsPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("namespace back after second destroy: %v", err)
	}
	// lever down, the deprecated alias, tears down a live instance exactly as destroy does.
	if err := b.EnsureUp(ctx); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(state), 0o700)
	os.WriteFile(state, []byte("k"), 0o600)
	if lo := run("down"); !lo.StateRemoved || fmt.Sprint(lo.Removed) != "[ca ca/ca.key]" {
		t.Errorf("down reported %+v", lo)
	}
	if exists(nsPath) || vethExists() || exists(cfg.StateDir()) {
		t.Errorf("after down the namespace, veth or state is still there")
	}

	// As a person reads it (issue 28: destroy printed thousands of paths): one line saying
	// how many entries went, no path; --verbose lists every one (the control that they
	// were there to list).
	text := func(args ...string) string {
		t.Helper()
		if err := b.EnsureUp(ctx); err != nil {
			t.Fatal(err)
		}
		for i := range 40 {
			p := filepath.Join(cfg.StateDir(), "podman", fmt.Sprintf("layer%02d", i))
			os.MkdirAll(filepath.Dir(p), 0o700)
			os.WriteFile(p, []byte("x"), 0o600)
		}
		var out, errw bytes.Buffer
		if code := Main(append(args, "-c", cfgPath), &out, &errw); code != 0 {
			t.Fatalf("lever %v: exit %d: %s", args, code, errw.String())
		}
		return out.String()
	}
	summary := "removed " + cfg.StateDir() + " (41 entries; --verbose lists them)\n"
	if out := text("destroy"); !strings.HasSuffix(out, summary) || strings.Contains(out, "layer") || strings.Count(out, "\n") != 3 {
		t.Errorf("lever destroy printed:\n%s\nwant three lines ending %q", out, summary)
	}
	if out := text("destroy", "--verbose"); !strings.Contains(out, "(41 entries):\n") || strings.Count(out, "  podman/layer") != 40 {
		t.Errorf("lever destroy --verbose printed:\n%s", out)
	}
}
