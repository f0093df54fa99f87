package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/lev/tomlx"
)

func TestStrictDecodeNamesKeyAndLine(t *testing.T) {
	type bp struct {
		Sandbox Config `toml:"sandbox"`
	}
	for _, tc := range []struct{ name, src, want string }{
		{"misspelt network", "[sandbox]\nkind = \"container\"\nnetwrok = false\n", `bp.toml:3: unknown key "sandbox.netwrok"`},
		{"engine args smuggled", "[sandbox]\nengine_args = [\"--privileged\"]\n", `bp.toml:2: unknown key "sandbox.engine_args"`},
		{"cap_add", "[sandbox]\nkind = \"container\"\ncap_add = [\"ALL\"]\n", `unknown key "sandbox.cap_add"`},
		{"wrong type", "[sandbox]\nnetwork = \"no\"\n", `bp.toml:2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v bp
			_, err := tomlx.Decode("bp.toml", []byte(tc.src), &v)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
	if err := CheckKeys(map[string]any{"kind": "none", "netwrok": false}); err == nil || !strings.Contains(err.Error(), `"netwrok"`) {
		t.Fatalf("CheckKeys: %v", err)
	}
	if err := CheckKeys(map[string]any{"kind": "x", "engine": 1, "image": 1, "network": 1, "mount": 1, "mounts": 1, "persist": 1, "on_unavailable": 1}); err != nil {
		t.Fatalf("CheckKeys refused a spec key: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c   Config
		key string
	}{
		{Config{Kind: "vm"}, "kind"},
		{Config{Kind: "container", OnUnavailable: "ignore"}, "on_unavailable"},
		{Config{Engine: "--privileged"}, "engine"},
		{Config{Engine: "podman --root /"}, "engine"},
		{Config{Image: "--privileged"}, "image"},
		{Config{Mount: "/a", Mounts: []string{"/b"}}, "mount"},
		{Config{Mounts: []string{"/ok", "rel/path"}}, "mounts[1]"},
		{Config{Mounts: []string{"/a/../etc"}}, "mounts[0]"},
		{Config{Mount: "/a:/b:rw:z"}, "mount"},
		{Config{Mount: "/a,type=bind"}, "mount"},
	} {
		err := tc.c.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Key != tc.key {
			t.Errorf("Validate(%+v) = %v, want key %s", tc.c, err, tc.key)
		}
	}
	good := Config{Kind: "container", Engine: "podman", Image: "localhost/x:1", Mounts: []string{"/data:ro", "/a:/b", "/c:/d:rw"}, OnUnavailable: "warn"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
}

func bp(b bool) *bool { return &b }

func TestMergeTightensNeverLoosens(t *testing.T) {
	for _, tc := range []struct {
		name      string
		user, bp  Config
		want      Config
		noteCount int
	}{
		{"blueprint picks container when user has none",
			Config{}, Config{Kind: "container", Image: "img"},
			Config{Kind: "container", Image: "img", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 0},
		{"blueprint cannot drop to none",
			Config{Kind: "container", Image: "u"}, Config{Kind: "none"},
			Config{Kind: "container", Image: "u", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 1},
		{"blueprint cannot drop container to namespace",
			Config{Kind: "container", Image: "u"}, Config{Kind: "namespace"},
			Config{Kind: "container", Image: "u", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 1},
		{"blueprint raises namespace to container",
			Config{Kind: "namespace"}, Config{Kind: "container", Image: "b"},
			Config{Kind: "container", Image: "b", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 0},
		{"engine never from blueprint",
			Config{Engine: "podman"}, Config{Kind: "container", Engine: "/tmp/evil", Image: "b"},
			Config{Kind: "container", Engine: "podman", Image: "b", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 1},
		{"user image pinned",
			Config{Image: "u"}, Config{Kind: "container", Image: "b"},
			Config{Kind: "container", Image: "u", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 1},
		{"blueprint turns network off",
			Config{}, Config{Network: bp(false)},
			Config{Kind: "none", Network: bp(false), Persist: bp(false), OnUnavailable: "error"}, 0},
		{"blueprint cannot turn network on",
			Config{Network: bp(false)}, Config{Network: bp(true)},
			Config{Kind: "none", Network: bp(false), Persist: bp(false), OnUnavailable: "error"}, 1},
		{"blueprint warn cannot loosen default error",
			Config{}, Config{OnUnavailable: "warn"},
			Config{Kind: "none", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 1},
		{"blueprint error tightens user warn",
			Config{OnUnavailable: "warn"}, Config{OnUnavailable: "error"},
			Config{Kind: "none", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 0},
		{"user warn kept",
			Config{OnUnavailable: "warn"}, Config{},
			Config{Kind: "none", Network: bp(true), Persist: bp(false), OnUnavailable: "warn"}, 0},
		{"blueprint mounts dropped, ro tightening kept",
			Config{Mounts: []string{"/data", "/docs:ro"}}, Config{Mounts: []string{"/data:ro", "/home/u/.ssh"}},
			Config{Kind: "none", Mounts: []string{"/data:/data:ro", "/docs:/docs:ro"}, Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 1},
		{"blueprint cannot make a ro mount rw",
			Config{Mounts: []string{"/docs:ro"}}, Config{Mount: "/docs:rw"},
			Config{Kind: "none", Mounts: []string{"/docs:/docs:ro"}, Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 0},
		{"persist needs the user",
			Config{}, Config{Persist: bp(true)},
			Config{Kind: "none", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 1},
		{"blueprint can turn persist off",
			Config{Persist: bp(true)}, Config{Persist: bp(false)},
			Config{Kind: "none", Network: bp(true), Persist: bp(false), OnUnavailable: "error"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, notes := Merge(tc.user, tc.bp)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("merge (-want +got):\n%s", d)
			}
			if len(notes) != tc.noteCount {
				t.Errorf("notes %q, want %d", notes, tc.noteCount)
			}
		})
	}
}

func TestOverlay(t *testing.T) {
	agent := Config{Kind: "container", Image: "a", Network: bp(false), Mounts: []string{"/x"}}
	got := Overlay(agent, Config{Kind: "none"})
	want := Config{Kind: "none", Image: "a", Network: bp(false), Mounts: []string{"/x"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatal(d)
	}
	// The stage's none still cannot loosen a user's container.
	m, _ := Merge(Config{Kind: "container", Image: "u"}, got)
	if m.Kind != "container" {
		t.Fatalf("stage override loosened the user: %+v", m)
	}
}

func TestRunArgv(t *testing.T) {
	s := Spec{Engine: "podman", EngineArgs: []string{"--runtime", "runc"}, Image: "localhost/bb:1", Network: false,
		Mounts: []Mount{{Src: "/data", Dst: "/data", ReadOnly: true}}, Workdir: "/w/proj", PidsLimit: 64, Memory: "128m"}
	got := s.RunArgv("lev-sbx-x", true)
	want := []string{"podman", "--runtime", "runc", "run", "-d", "--name", "lev-sbx-x", "--label", "lev.sandbox=" + s.Key(),
		"--cap-drop=ALL", "--security-opt", "no-new-privileges", "--pids-limit", "64", "--memory", "128m",
		"--network", "none", "-v", "/w/proj:/w/proj:rw", "-w", "/w/proj", "-v", "/data:/data:ro",
		"--stop-signal", "KILL", "--entrypoint", "sleep", "localhost/bb:1", "2147483647"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatal(d)
	}
	// With the keep-alive (keepalive.go): --rm, lev's binary read-only, fd 3 passed in,
	// and PID 1 is the keep-alive instead of sleep.
	ka := s
	ka.KeepAlive = "/opt/lev/bin/lev"
	want = append(append(append([]string{}, want[:5]...), "--rm"), want[5:len(want)-6]...)
	want = append(want, "-v", "/opt/lev/bin/lev:"+KeepAlivePath+":ro", "--preserve-fds", "1",
		"--stop-signal", "KILL", "--entrypoint", KeepAlivePath, "localhost/bb:1", KeepAliveArg)
	if d := cmp.Diff(want, ka.RunArgv("lev-sbx-x", true)); d != "" {
		t.Fatal(d)
	}
	s.Network = true
	oneShot := s.RunArgv("", false, "sh", "-c", "true")
	for _, a := range oneShot {
		if a == "none" {
			t.Fatal("network = true still passed --network none")
		}
	}
	if d := cmp.Diff([]string{"--entrypoint", "sh", "localhost/bb:1", "-c", "true"}, oneShot[len(oneShot)-5:]); d != "" {
		t.Fatalf("one-shot argv %q: %s", oneShot, d)
	}
	// Keys: equal specs share, any difference separates.
	a := Spec{Engine: "podman", Image: "i", Workdir: "/w", PidsLimit: 1, Memory: "1m"}
	b := a
	if a.Key() != b.Key() {
		t.Fatal("equal specs hash apart")
	}
	for _, mut := range []func(*Spec){
		func(s *Spec) { s.Network = true },
		func(s *Spec) { s.Image = "j" },
		func(s *Spec) { s.Workdir = "/v" },
		func(s *Spec) { s.Mounts = []Mount{{Src: "/a", Dst: "/a"}} },
		func(s *Spec) { s.Persist = true },
	} {
		c := a
		mut(&c)
		if c.Key() == a.Key() {
			t.Errorf("spec %+v shares a key with %+v", c, a)
		}
	}
}

func TestOnUnavailable(t *testing.T) {
	wd := t.TempDir()
	var logged []string
	m := NewManager(Options{Engine: "lvtsbx-no-such-engine", Logf: func(f string, a ...any) { logged = append(logged, f) }})
	defer m.Close()
	cfg := Config{Kind: "container", Image: "x", OnUnavailable: "error"}
	_, err := m.Executor(context.Background(), cfg, wd)
	var ue *UnavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `container engine "lvtsbx-no-such-engine" not found on PATH`) {
		t.Fatalf("error mode: %v", err)
	}
	cfg.OnUnavailable = "warn"
	ex, err := m.Executor(context.Background(), cfg, wd)
	if err != nil || ex.Kind() != KindNone || len(logged) != 1 {
		t.Fatalf("warn mode: %v %v %v", ex, err, logged)
	}
	os.WriteFile(filepath.Join(wd, "f"), []byte("hello"), 0o600)
	res, err := ex.Run(context.Background(), Command{Script: "cat f; exit 3", Dir: wd})
	if err != nil || string(res.Stdout) != "hello" || res.ExitCode != 3 {
		t.Fatalf("host fallback run: %+v %v", res, err)
	}
	// Namespace without unshare.
	m2 := NewManager(Options{LookPath: func(n string) (string, error) { return "", errors.New("not found") }})
	if _, err := m2.Executor(context.Background(), Config{Kind: "namespace"}, wd); !errors.As(err, &ue) {
		t.Fatalf("namespace without unshare: %v", err)
	}
	// Missing image is a config error, not "unavailable", so warn does not hide it.
	if _, err := m.Executor(context.Background(), Config{Kind: "container", OnUnavailable: "warn"}, wd); err == nil || !strings.Contains(err.Error(), "needs an image") {
		t.Fatalf("no image: %v", err)
	}
	if _, err := m.Executor(context.Background(), Config{Kind: "container", Image: "x"}, "/tmp/a:/etc"); err == nil || !strings.Contains(err.Error(), "cannot be bind-mounted") {
		t.Fatalf("workdir with a colon: %v", err)
	}
	if _, err := m.Executor(context.Background(), Config{Kind: "none"}, "rel"); err == nil {
		t.Fatal("relative workdir accepted")
	}
}
