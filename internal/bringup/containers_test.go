package bringup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/levsettings"
)

// TestContainersHonourImageAndBlueprintKeys: manager.image, workers[].image and
// lev.blueprint reach the containers they name, and only those.
func TestContainersHonourImageAndBlueprintKeys(t *testing.T) {
	cfg := &config.Config{Name: "t", Egress: "open",
		Manager: config.Manager{Image: "localhost/mgr:1"},
		Workers: []config.Worker{{Name: "a", Dir: "wa", Image: "localhost/wa:1"}, {Name: "b", Dir: "wb"}},
		Lev:     config.Lev{Blueprint: "agents/cto.toml"},
		Broker:  config.Broker{JailPort: 7443},
	}
	in := &Instance{cfg: cfg, imageRef: "localhost/lever/lev:abc", TreeSrc: "/lever", prepared: true}
	cs, err := in.Containers(Facts{AliasV4: "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][2]string{}
	for _, c := range cs {
		if c.Role == containers.Bench {
			// no image step ran: the lev image stands in for the workbench
			if c.Image != "localhost/lever/lev:abc" {
				t.Errorf("%s image %s", c.Name, c.Image)
			}
			continue
		}
		got[string(c.Role)+":"+c.Env["LEVER_WORKER"]] = [2]string{c.Image, c.Env["LEV_BLUEPRINT"]}
	}
	want := map[string][2]string{
		string(containers.Manager) + ":": {"localhost/mgr:1", "/lever/agents/cto.toml"},
		string(containers.Worker) + ":a": {"localhost/wa:1", ""},
		string(containers.Worker) + ":b": {"localhost/mgr:1", ""}, // defaults to manager.image
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: image, LEV_BLUEPRINT = %q, want %q", k, got[k], w)
		}
	}
}

// TestContainersEnvAndImages: each lev container finds its home, settings, token, API
// socket and bench from what lever mounts (no LEV_PROTECT: no lev home is in the tree any
// more); the bench containers run the workbench image; the settings hash rides in the
// lev containers' env, so a settings change restarts them and nothing else.
func TestContainersEnvAndImages(t *testing.T) {
	cfg := &config.Config{Name: "t", Egress: "open",
		Workers: []config.Worker{{Name: "a", Dir: "wa"}, {Name: "b", Dir: "sub/wb"}},
		Broker:  config.Broker{JailPort: 7443},
	}
	mk := func(b *levsettings.Bundle, inPlace bool) *Instance {
		return &Instance{cfg: cfg, imageRef: "localhost/lever/lev:abc", TreeSrc: "/lever", prepared: true,
			settings: b, settingsHash: b.Hash(), InPlace: inPlace}
	}
	plain := &levsettings.Bundle{Config: []byte("[provider]\nmodel = \"m\"\n"), Agents: map[string][]byte{}}
	withPolicy := &levsettings.Bundle{Config: plain.Config, Agents: map[string][]byte{}, Policy: []byte("default = \"deny\"\n"), HasPolicy: true}
	edited := &levsettings.Bundle{Config: []byte("[provider]\nmodel = \"n\"\n"), Agents: map[string][]byte{}}
	plan := func(in *Instance) map[string]containers.Container {
		cs, err := in.Containers(Facts{BenchRef: "localhost/lever/bench:def", AliasV4: "10.0.0.1", UID: 1001})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]containers.Container{}
		for _, c := range cs {
			m[c.Name] = c
		}
		if len(m) != 6 {
			t.Fatalf("%d containers, want 6", len(m))
		}
		return m
	}
	base := plan(mk(plain, false))
	cases := []struct {
		name, container, key, want string
	}{
		{"lev home out of the tree", "lever-t-manager", "LEV_HOME", "/var/lib/lev"},
		{"settings pushed by lever", "lever-t-worker-a", "LEV_CONFIG", "/run/lever/config.toml"},
		{"blueprints from the host", "lever-t-worker-b", "LEV_AGENTS_DIR", "/run/lever/agents"},
		{"token file", "lever-t-manager", "LEV_TOKEN_FILE", "/run/lever/token"},
		{"unix socket, no TCP port in the bench's reach", "lever-t-manager", "LEV_LISTEN", "unix:/var/lib/lev/api.sock"},
		{"bench socket", "lever-t-worker-a", "LEV_BENCH_SOCKET", "/run/lever-bench/exec.sock"},
		{"no policy pushed: no LEV_POLICY", "lever-t-manager", "LEV_POLICY", ""},
		{"no LEV_PROTECT for the manager", "lever-t-manager", "LEV_PROTECT", ""},
		{"settings hash", "lever-t-manager", "LEVER_SETTINGS", plain.Hash()},
		{"bench: no lev env", "lever-t-manager-bench", "LEV_HOME", ""},
		{"bench: PATH", "lever-t-worker-a-bench", "PATH", containers.BenchPath},
	}
	for _, tc := range cases {
		if got := base[tc.container].Env[tc.key]; got != tc.want {
			t.Errorf("%s: %s %s=%q, want %q", tc.name, tc.container, tc.key, got, tc.want)
		}
	}
	for name, c := range base {
		img := "localhost/lever/lev:abc"
		if c.Role == containers.Bench {
			img = "localhost/lever/bench:def"
		}
		if c.Image != img {
			t.Errorf("%s image %s, want %s", name, c.Image, img)
		}
	}
	if m := base["lever-t-manager"].Mounts; m[len(m)-2].Source != "/var/lib/lever/t/lev/manager" {
		t.Errorf("VM guest lev home %s", m[len(m)-2].Source)
	}
	cfg.Dir = t.TempDir()
	t.Setenv("LEVER_STATE_DIR", t.TempDir())
	if m := plan(mk(plain, true))["lever-t-worker-a"].Mounts; m[len(m)-2].Source != filepath.Join(cfg.StateDir(), "guest", "levhome", "worker-a") {
		t.Errorf("netns lev home %s", m[len(m)-2].Source)
	}
	// What a settings change restarts: every lev container, no bench.
	for _, tc := range []struct {
		name string
		b    *levsettings.Bundle
	}{{"policy added", withPolicy}, {"config edited", edited}} {
		next := plan(mk(tc.b, false))
		for name, c := range next {
			changed := c.Hash() != base[name].Hash()
			if changed != (c.Role != containers.Bench) {
				t.Errorf("%s: %s hash changed=%v", tc.name, name, changed)
			}
		}
		if tc.b.HasPolicy && next["lever-t-worker-b"].Env["LEV_POLICY"] != "/run/lever/policy.toml" {
			t.Errorf("%s: LEV_POLICY %q", tc.name, next["lever-t-worker-b"].Env["LEV_POLICY"])
		}
	}
}

// TestContainersProtectWhatTheHostTrusts: lever.yaml in the tree and the .git of the
// repositories at the tree's root and in a worker's dir, as they are on the host at
// bring-up, are read-only mounts; git: writable leaves .git to the agents (lever.yaml
// stays protected); a .git that is a symlink stops the plan.
func TestContainersProtectWhatTheHostTrusts(t *testing.T) {
	tree := t.TempDir()
	for _, d := range []string{".git/hooks", "wa/.git", "wb"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	roOf := func(git string) map[string][]string {
		cfg := &config.Config{Name: "t", Egress: "open", Git: git, TreePath: tree, ConfigInTree: "lever.yaml",
			Workers: []config.Worker{{Name: "a", Dir: "wa"}, {Name: "b", Dir: "wb"}},
			Broker:  config.Broker{JailPort: 7443},
		}
		in := &Instance{cfg: cfg, imageRef: "localhost/lever/lev:abc", TreeSrc: "/lever", prepared: true}
		cs, err := in.Containers(Facts{AliasV4: "10.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, c := range cs {
			for _, m := range c.Mounts {
				if m.ReadOnly && strings.HasPrefix(m.Dest, "/lever/") {
					out[c.Name] = append(out[c.Name], m.Dest)
				}
			}
		}
		return out
	}
	cases := []struct {
		git       string
		container string
		want      string
	}{
		{"", "lever-t-manager", "/lever/.git /lever/lever.yaml /lever/wa/.git"}, // no default applied: fails safe
		{config.GitReadOnly, "lever-t-manager-bench", "/lever/.git /lever/lever.yaml /lever/wa/.git"},
		{config.GitReadOnly, "lever-t-worker-a-bench", "/lever/wa/.git"},
		{config.GitReadOnly, "lever-t-worker-b", ""},
		{config.GitWritable, "lever-t-manager-bench", "/lever/lever.yaml"},
		{config.GitWritable, "lever-t-worker-a-bench", ""},
	}
	for _, tc := range cases {
		if got := strings.Join(roOf(tc.git)[tc.container], " "); got != tc.want {
			t.Errorf("git %q, %s: read-only tree mounts %q, want %q", tc.git, tc.container, got, tc.want)
		}
	}

	if err := os.Symlink("elsewhere", filepath.Join(tree, "wb", ".git")); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Name: "t", Egress: "open", Git: config.GitReadOnly, TreePath: tree,
		Workers: []config.Worker{{Name: "b", Dir: "wb"}}, Broker: config.Broker{JailPort: 7443}}
	in := &Instance{cfg: cfg, imageRef: "localhost/lever/lev:abc", TreeSrc: "/lever", prepared: true}
	if _, err := in.Containers(Facts{AliasV4: "10.0.0.1"}); err == nil || !strings.Contains(err.Error(), "wb/.git is a symlink") {
		t.Errorf("a symlinked .git: err %v", err)
	}
}

// TestTreeNamesIgnoreMountsInsideMounts: the trees carry the mount points of the
// containers that run them, but not those inside another mount (a protected .git under
// /lever): a .git appearing in the project renames, and so rebuilds, neither tree. A new
// worker's dir, a mount point of its own, does (the control).
func TestTreeNamesIgnoreMountsInsideMounts(t *testing.T) {
	t.Setenv("LEVER_STATE_DIR", t.TempDir())
	tree := t.TempDir()
	mk := func(workers ...config.Worker) (string, string) {
		cfg := &config.Config{Name: "t", Egress: "open", Git: config.GitReadOnly, TreePath: tree, ConfigInTree: "lever.yaml",
			Workers: workers, Broker: config.Broker{JailPort: 7443}}
		in := &Instance{cfg: cfg, imageRef: "localhost/lever/lev:abc", TreeSrc: "/lever", prepared: true}
		return in.levTree(), in.benchTree("localhost/lever/workbench:1")
	}
	lev0, bench0 := mk()
	if err := os.MkdirAll(filepath.Join(tree, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if lev1, bench1 := mk(); lev1 != lev0 || bench1 != bench0 {
		t.Errorf("a .git renamed the trees: %s -> %s, %s -> %s", lev0, lev1, bench0, bench1)
	}
	if lev2, bench2 := mk(config.Worker{Name: "a", Dir: "wa"}); lev2 == lev0 || bench2 == bench0 {
		t.Errorf("control: a worker's dir did not change the trees' mount points: %s, %s", lev2, bench2)
	}
}
