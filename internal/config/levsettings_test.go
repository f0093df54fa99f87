package config

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLevSettingsPaths: lev.config, lev.agents and lev.policy are host paths that must
// stay out of the tree by every spelling (plain, a symlink from outside pointing in, a
// bind mount of the tree). Each refusal names the key and its line in lever.yaml; the
// benign variant of each attack (the same link pointing outside) loads, resolved.
func TestLevSettingsPaths(t *testing.T) {
	setup := func(t *testing.T, dir string) {
		os.MkdirAll(filepath.Join(dir, "outside", "agents"), 0o755)
		os.MkdirAll(filepath.Join(dir, "proj", ".lev", "agents"), 0o755)
		for _, f := range []string{"outside/lev.toml", "outside/policy.toml", "proj/.lev/config.toml", "proj/policy.toml"} {
			os.WriteFile(filepath.Join(dir, f), nil, 0o644)
		}
	}
	cases := []struct {
		name  string
		lev   string
		setup func(t *testing.T, dir string)
		want  string // "" = loads; else the error contains it ({f}: lever.yaml)
		check func(t *testing.T, dir string, c *Config)
	}{
		{name: "all three outside the tree load, resolved", lev: "  config: outside/lev.toml\n  agents: outside/agents\n  policy: outside/policy.toml\n",
			check: func(t *testing.T, dir string, c *Config) {
				if c.Lev.Config != filepath.Join(dir, "outside/lev.toml") || c.Lev.Agents != filepath.Join(dir, "outside/agents") || c.Lev.Policy != filepath.Join(dir, "outside/policy.toml") {
					t.Errorf("lev %+v", c.Lev)
				}
			}},
		{name: "config inside the tree", lev: "  config: proj/.lev/config.toml\n", want: "{f}:7: lev.config: "},
		{name: "config inside the tree: says why", lev: "  config: proj/.lev/config.toml\n", want: "the agents write the tree"},
		{name: "agents dir inside the tree", lev: "  agents: proj/.lev/agents\n", want: "{f}:7: lev.agents: "},
		{name: "policy inside the tree", lev: "  config: outside/lev.toml\n  policy: proj/policy.toml\n", want: "{f}:8: lev.policy: "},
		{name: "agents is the tree itself", lev: "  agents: proj\n", want: "lev.agents: "},
		{name: "symlink outside pointing into the tree", lev: "  config: outside/link.toml\n",
			setup: func(t *testing.T, dir string) {
				os.Symlink(filepath.Join(dir, "proj/.lev/config.toml"), filepath.Join(dir, "outside/link.toml"))
			}, want: "resolves to {d}/proj/.lev/config.toml"},
		{name: "positive control: the same symlink pointing outside loads", lev: "  config: outside/link.toml\n",
			setup: func(t *testing.T, dir string) {
				os.Symlink(filepath.Join(dir, "outside/lev.toml"), filepath.Join(dir, "outside/link.toml"))
			},
			check: func(t *testing.T, dir string, c *Config) {
				if c.Lev.Config != filepath.Join(dir, "outside/lev.toml") {
					t.Errorf("config %q, want the link's target", c.Lev.Config)
				}
			}},
		{name: "symlinked parent dir pointing into the tree", lev: "  agents: outside/via/agents\n",
			setup: func(t *testing.T, dir string) {
				os.Symlink(filepath.Join(dir, "proj/.lev"), filepath.Join(dir, "outside/via"))
			}, want: "lev.agents: "},
		{name: "agents names a file", lev: "  agents: outside/lev.toml\n", want: "{f}:7: lev.agents: {d}/outside/lev.toml is not a directory"},
		{name: "config names a directory", lev: "  config: outside/agents\n", want: "is not a regular file"},
		{name: "policy missing", lev: "  policy: outside/nope.toml\n", want: "{f}:7: lev.policy: "},
		{name: "unknown lev key", lev: "  polcy: outside/policy.toml\n", want: "lev.polcy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := fixture(t)
			setup(t, dir)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			c, err := load(t, dir, base+"lev:\n"+tc.lev)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				tc.check(t, dir, c)
				return
			}
			want := strings.NewReplacer("{f}", filepath.Join(dir, "lever.yaml"), "{d}", dir).Replace(tc.want)
			var ps Problems
			if err == nil || !strings.Contains(err.Error(), want) || !errors.As(err, &ps) {
				t.Fatalf("got %v, want an error containing %q", err, want)
			}
		})
	}
}

// TestLevSettingsBindMountOfTree: a bind mount of the tree has no symlink to follow;
// lev.config through it is still the tree. Positive control: the same path is accepted
// once the mount is gone and a plain directory stands there.
func TestLevSettingsBindMountOfTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount")
	}
	dir := fixture(t)
	os.MkdirAll(filepath.Join(dir, "proj", ".lev"), 0o755)
	os.WriteFile(filepath.Join(dir, "proj", ".lev", "config.toml"), nil, 0o644)
	mnt := filepath.Join(dir, "outside", "mnt")
	os.MkdirAll(mnt, 0o755)
	if out, err := exec.Command("mount", "--bind", filepath.Join(dir, "proj"), mnt).CombinedOutput(); err != nil {
		t.Skipf("bind mount: %v %s", err, out)
	}
	unmounted := false
	defer func() {
		if !unmounted {
			exec.Command("umount", mnt).Run()
		}
	}()
	_, err := load(t, dir, base+"lev:\n  config: outside/mnt/.lev/config.toml\n")
	if err == nil || !strings.Contains(err.Error(), "lev.config: ") || !strings.Contains(err.Error(), "mounted at another path") {
		t.Fatalf("bind mount of the tree not refused: %v", err)
	}
	exec.Command("umount", mnt).Run()
	unmounted = true
	os.MkdirAll(filepath.Join(mnt, ".lev"), 0o755)
	os.WriteFile(filepath.Join(mnt, ".lev", "config.toml"), nil, 0o644)
	if _, err := load(t, dir, base+"lev:\n  config: outside/mnt/.lev/config.toml\n"); err != nil {
		t.Fatalf("plain directory refused: %v", err)
	}
}
