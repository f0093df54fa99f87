package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/hosttrust"
)

// fakeBackend records lifecycle calls; it is handed to stop/destroy directly, never
// registered, so the registry stays exactly the real backends.
type fakeBackend struct {
	calls      []string
	destroyErr error
}

func (f *fakeBackend) Name() string                   { return "fake" }
func (f *fakeBackend) EnsureUp(context.Context) error { f.calls = append(f.calls, "up"); return nil }
func (f *fakeBackend) Stop(context.Context) error     { f.calls = append(f.calls, "stop"); return nil }
func (f *fakeBackend) Runner() guest.Runner           { return nil }
func (f *fakeBackend) HostAlias() string              { return "host.fake.internal" }
func (f *fakeBackend) Profile() backend.Profile       { return backend.Profile{Name: "fake"} }
func (f *fakeBackend) Destroy(ctx context.Context) error {
	f.calls = append(f.calls, "destroy")
	return f.destroyErr
}

// instance makes a project (lever.yaml + tree) and a separate state root with some
// files in the instance's state directory.
func instance(t *testing.T) *config.Config {
	t.Helper()
	proj, _ := filepath.EvalSymlinks(t.TempDir())
	state, _ := filepath.EvalSymlinks(t.TempDir())
	t.Setenv("LEVER_STATE_DIR", state)
	os.MkdirAll(filepath.Join(proj, "src"), 0o755)
	os.WriteFile(filepath.Join(proj, "src", "main.go"), []byte("package main\n"), 0o644)
	p := filepath.Join(proj, "lever.yaml")
	os.WriteFile(p, []byte("name: demo\nbackend: lima\nbroker:\n  llm_auth: subscription\n"), 0o644)
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca/ca.key", "ca/ca.crt", "broker/audit.jsonl", "tickets/w1"} {
		fp := filepath.Join(cfg.StateDir(), f)
		os.MkdirAll(filepath.Dir(fp), 0o700)
		os.WriteFile(fp, []byte("x"), 0o600)
	}
	return cfg
}

func TestDestroyRemovesGuestAndState(t *testing.T) {
	cfg := instance(t)
	f := &fakeBackend{}
	out, err := bringup.Destroy(context.Background(), cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	want := bringup.Lifecycle{Instance: "demo", Backend: "fake", Guest: "lever-demo", GuestAction: "destroyed",
		StateDir: cfg.StateDir(), StateRemoved: true,
		Removed: []string{"broker", "broker/audit.jsonl", "ca", "ca/ca.crt", "ca/ca.key", "tickets", "tickets/w1"}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"destroy"}, f.calls); diff != "" {
		t.Errorf("backend calls (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(cfg.StateDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.TreePath, "src", "main.go")); err != nil {
		t.Errorf("destroy touched the tree: %v", err)
	}
	if _, err := os.Stat(config.StateRoot()); err != nil {
		t.Errorf("destroy removed the state root shared by other instances: %v", err)
	}

	// Again: nothing left, still a success, and it says so.
	out, err = bringup.Destroy(context.Background(), cfg, f)
	if err != nil || out.StateRemoved || len(out.Removed) != 0 {
		t.Fatalf("second destroy: %+v, %v", out, err)
	}
	var text bytes.Buffer
	report(&text, false, false, out)
	if diff := cmp.Diff("destroyed guest lever-demo (fake)\nbroker was not running\nno host state to remove ("+cfg.StateDir()+" did not exist)\n", text.String()); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
}

// TestDestroyTextSummarises: a person reads how many entries went, not thousands of paths
// (a netns jail's state holds podman's storage); --verbose and --json list every one.
func TestDestroyTextSummarises(t *testing.T) {
	out := bringup.Lifecycle{Instance: "demo", Backend: "fake", Guest: "lever-demo", GuestAction: "destroyed",
		StateDir: "/s/demo", StateRemoved: true, Removed: []string{"broker", "broker/audit.jsonl", "ca"}}
	head := "destroyed guest lever-demo (fake)\nbroker was not running\n"
	cases := []struct {
		name          string
		json, verbose bool
		want          string
	}{
		{"summary", false, false, head + "removed /s/demo (3 entries; --verbose lists them)\n"},
		{"verbose", false, true, head + "removed /s/demo (3 entries):\n  broker\n  broker/audit.jsonl\n  ca\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := report(&b, tc.json, tc.verbose, out); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("text (-want +got):\n%s", diff)
			}
		})
	}
	var b bytes.Buffer
	if err := report(&b, true, false, out); err != nil {
		t.Fatal(err)
	}
	var got bringup.Lifecycle
	if err := json.Unmarshal(b.Bytes(), &got); err != nil || !cmp.Equal(got.Removed, out.Removed) {
		t.Errorf("--json: %v, removed %v, want every path", err, got.Removed)
	}
}

func TestDestroyKeepsStateWhenGuestSurvives(t *testing.T) {
	cfg := instance(t)
	f := &fakeBackend{destroyErr: errors.New("limactl delete: exit 1")}
	_, err := bringup.Destroy(context.Background(), cfg, f)
	want := "destroying guest lever-demo (fake): limactl delete: exit 1; host state in " + cfg.StateDir() + " is kept"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir(), "ca", "ca.key")); err != nil {
		t.Errorf("state removed although the guest was not: %v", err)
	}
}

// Attack: the state root is arranged so that the instance's state directory is the
// project itself. destroy must refuse rather than delete the project.
func TestDestroyRefusesStateDirHoldingTheTree(t *testing.T) {
	parent, _ := filepath.EvalSymlinks(t.TempDir())
	proj := filepath.Join(parent, "demo")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "keep.txt"), []byte("mine"), 0o644)
	t.Setenv("LEVER_STATE_DIR", parent) // StateDir = parent/demo = the project
	cfg := &config.Config{Name: "demo", Backend: "lima", TreePath: proj}
	f := &fakeBackend{}
	_, err := bringup.Destroy(context.Background(), cfg, f)
	want := "refusing to remove " + proj + ": it contains the project tree " + proj
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(proj, "keep.txt")); err != nil {
		t.Fatalf("project damaged: %v", err)
	}
}

func TestStopKeepsState(t *testing.T) {
	cfg := instance(t)
	f := &fakeBackend{}
	out, err := bringup.Stop(context.Background(), cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(bringup.Lifecycle{Instance: "demo", Backend: "fake", Guest: "lever-demo", GuestAction: "stopped"}, out); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"stop"}, f.calls); diff != "" {
		t.Errorf("backend calls (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir(), "ca", "ca.key")); err != nil {
		t.Errorf("stop removed state: %v", err)
	}
}

// A bad config is refused before anything is touched.
func TestStopDestroyBadConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lever.yaml")
	os.WriteFile(p, []byte("name: demo\nbackend: docker\n"), 0o644)
	for _, cmd := range []string{"stop", "destroy"} {
		var out, errw bytes.Buffer
		code := Main([]string{cmd, "-c", p}, &out, &errw)
		want := "lever: " + p + `:2: backend: "docker" is not a backend lever implements (one of lima, netns, orbstack); lever never substitutes another` + "\n"
		if code != 2 || errw.String() != want {
			t.Errorf("%s: exit %d, stderr %q, want 2 and %q", cmd, code, errw.String(), want)
		}
	}
}

// TestDownIsDeprecatedDestroy: `lever down` runs destroy's code (the same refusal for the
// same bad input, the same output for the same instance) and says on stderr that it is
// deprecated; destroy itself says nothing of the kind.
func TestDownIsDeprecatedDestroy(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope", "lever.yaml")
	for _, args := range [][]string{{"-c", missing}, {"-c", missing, "--json"}} {
		var dOut, dErr, wOut, wErr bytes.Buffer
		dCode := Main(append([]string{"destroy"}, args...), &dOut, &dErr)
		wCode := Main(append([]string{"down"}, args...), &wOut, &wErr)
		if dCode == 0 || wCode != dCode {
			t.Fatalf("%v: destroy exit %d, down exit %d (want the same failure)", args, dCode, wCode)
		}
		deprecation := "lever down is deprecated: it is lever destroy"
		if !strings.Contains(wErr.String(), deprecation) || strings.Contains(dErr.String(), deprecation) {
			t.Fatalf("%v: down stderr %q, destroy stderr %q", args, wErr.String(), dErr.String())
		}
		if got := strings.TrimPrefix(wErr.String(), wErr.String()[:strings.Index(wErr.String(), "\n")+1]); got != dErr.String() {
			t.Fatalf("%v: down's error %q differs from destroy's %q", args, got, dErr.String())
		}
		if wOut.String() != dOut.String() {
			t.Fatalf("%v: stdout differs: down %q, destroy %q", args, wOut.String(), dOut.String())
		}
	}
}

// Destroy also removes lever's copy of a lever.yaml in the tree (nothing is brought up
// any more) and says so; a second destroy finds none.
func TestDestroyForgetsTheAcceptedConfig(t *testing.T) {
	cfg := instance(t)
	real, ok := inTreeConfig(cfg)
	if !ok {
		t.Fatalf("the instance's lever.yaml is not in its tree: %+v", cfg)
	}
	data, _ := os.ReadFile(real)
	if err := hosttrust.AcceptConfig(config.StateRoot(), real, data); err != nil {
		t.Fatal(err)
	}
	pin := hosttrust.ConfigPin(config.StateRoot(), real)
	out, err := destroy(context.Background(), cfg, &fakeBackend{})
	if err != nil || out.AcceptedConfig != pin {
		t.Fatalf("destroy: %+v %v", out, err)
	}
	if _, err := os.Stat(pin); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy is still there: %v", err)
	}
	var text bytes.Buffer
	report(&text, false, false, out)
	if !strings.Contains(text.String(), "removed lever's copy of the lever.yaml it brought up ("+pin+")") {
		t.Errorf("text: %s", text.String())
	}
	if out, err := destroy(context.Background(), cfg, &fakeBackend{}); err != nil || out.AcceptedConfig != "" {
		t.Errorf("second destroy: %+v %v", out, err)
	}
}
