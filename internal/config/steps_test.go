package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestValidateDoesNotRewrite: resolve is the one step that rewrites a host path; validate
// only reads. Each row's lever.yaml has paths resolve must rewrite (the positive control:
// resolve changes the config, so the row reaches the rewriting code), and validate must
// leave the resolved config exactly as it found it, whether the file is valid or not.
func TestValidateDoesNotRewrite(t *testing.T) {
	setup := func(t *testing.T, dir string) {
		os.MkdirAll(filepath.Join(dir, "outside", "agents"), 0o755)
		for _, f := range []string{"outside/lev.toml", "outside/img.qcow2", "outside/lev.tar", "proj/in.tar"} {
			os.WriteFile(filepath.Join(dir, f), nil, 0o644)
		}
		os.Symlink(filepath.Join(dir, "outside/lev.toml"), filepath.Join(dir, "outside/link.toml"))
		os.Symlink("proj", filepath.Join(dir, "treelink"))
	}
	cases := []struct {
		name  string
		body  string
		valid bool
	}{
		{name: "relative key file and tree through a symlink", valid: true,
			body: strings.Replace(base, "tree: proj", "tree: treelink", 1)},
		{name: "lev settings through a symlink", valid: true,
			body: base + "lev:\n  config: outside/link.toml\n  agents: outside/agents\n  image_tarball: outside/lev.tar\n"},
		{name: "lima paths and a limactl path", valid: true,
			body: base + "lima:\n  image: outside/img.qcow2\n  limactl: bin/limactl\n"},
		{name: "invalid: lev setting missing", body: base + "lev:\n  config: outside/nope.toml\n"},
		{name: "invalid: base tarball in the tree", body: base + "lev:\n  base_tarball: proj/in.tar\n"},
		{name: "invalid: lima image missing", body: base + "lima:\n  image: nope.qcow2\n"},
		{name: "invalid: tree missing, paths still resolved", body: strings.Replace(base, "tree: proj", "tree: gone", 1) + "lev:\n  config: outside/link.toml\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := fixture(t)
			setup(t, dir)
			path := filepath.Join(dir, "lever.yaml")
			var c Config
			lines, probs := decode(path, []byte(tc.body), &c)
			if len(probs) > 0 {
				t.Fatal(probs)
			}
			c.Path, c.Dir = path, dir
			applyDefaults(&c)
			before := c
			r := resolve(&c)
			if cmp.Diff(before, c) == "" {
				t.Fatal("resolve rewrote nothing: the row does not reach the path resolution")
			}
			resolved := c
			resolved.Workers = append([]Worker(nil), c.Workers...)
			probs = validate(&c, path, lines, r)
			if (len(probs) == 0) != tc.valid {
				t.Fatalf("valid = %t, problems: %v", len(probs) == 0, probs)
			}
			if diff := cmp.Diff(resolved, c); diff != "" {
				t.Errorf("validate rewrote the config (-resolved +after validate):\n%s", diff)
			}
		})
	}
}

// TestLoadReadsWhatItChecked: a lev setting reached through a symlink in the tree (which
// an agent can re-point) is resolved once, and the path Load returns is the path it
// checked: re-pointing the in-tree link after Load does not change what lever reads.
// The control row points the same link into the tree before Load, and Load refuses it.
func TestLoadReadsWhatItChecked(t *testing.T) {
	for _, intoTree := range []bool{false, true} {
		dir := fixture(t)
		os.WriteFile(filepath.Join(dir, "outside/lev.toml"), []byte("host"), 0o644)
		os.WriteFile(filepath.Join(dir, "proj/a/lev.toml"), []byte("agent"), 0o644)
		target := filepath.Join(dir, "outside")
		if intoTree {
			target = filepath.Join(dir, "proj/a")
		}
		symlink(t, target, filepath.Join(dir, "proj/via"))
		symlink(t, filepath.Join(dir, "proj/via/lev.toml"), filepath.Join(dir, "settings.toml"))
		c, err := load(t, dir, base+"lev:\n  config: settings.toml\n")
		if intoTree {
			if err == nil || !strings.Contains(err.Error(), "lev.config: "+dir+"/settings.toml is inside the tree") {
				t.Fatalf("link into the tree: err %v, want a refusal", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		// The agent re-points its link into the tree after the check.
		os.Remove(filepath.Join(dir, "proj/via"))
		symlink(t, filepath.Join(dir, "proj/a"), filepath.Join(dir, "proj/via"))
		got, err := os.ReadFile(c.Lev.Config)
		if err != nil || string(got) != "host" {
			t.Fatalf("lever reads %s: %q, %v; want the checked host file", c.Lev.Config, got, err)
		}
	}
}
