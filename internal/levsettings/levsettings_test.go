package levsettings

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadValidatesWithLevsLoaders: each bad file is refused on the host naming the
// lever.yaml key, the file and (where lev's loader has one) the TOML key and line; the
// good bundle next to it loads (the positive control for every row).
func TestLoadValidatesWithLevsLoaders(t *testing.T) {
	good := map[string]string{
		"lev.toml":                "[provider]\nmodel = \"m\"\n",
		"agents/a.toml":           "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"submit_output\"]\n",
		"agents/b/blueprint.toml": "name = \"b\"\nversion = \"1\"\n[stages.s]\ntools = [\"read_file\"]\n",
		"agents/b/seed.txt":       "not a blueprint: [not toml",
		"policy.toml":             "default = \"deny\"\n",
	}
	cases := []struct {
		name string
		mod  func(dir string)
		want string // "" = loads
	}{
		{"good", func(string) {}, ""},
		{"config: unknown key, line named", func(d string) {
			os.WriteFile(filepath.Join(d, "lev.toml"), []byte("[provider]\nmodel = \"m\"\nmodle = \"x\"\n"), 0o644)
		}, "lev.config: {d}/lev.toml:3"},
		{"config: bad TOML, line named", func(d string) {
			os.WriteFile(filepath.Join(d, "lev.toml"), []byte("[provider]\n\nmodel = \n"), 0o644)
		}, "lev.config: {d}/lev.toml:3"},
		{"config: bad value", func(d string) {
			os.WriteFile(filepath.Join(d, "lev.toml"), []byte("[provider]\nkind = \"smoke\"\n"), 0o644)
		}, "provider.kind"},
		{"config: policy_file could name the tree", func(d string) {
			os.WriteFile(filepath.Join(d, "lev.toml"), []byte("[security]\npolicy_file = \"/lever/p.toml\"\n"), 0o644)
		}, "security.policy_file: not used in the jail; set lev.policy"},
		{"blueprint: unknown tool", func(d string) {
			os.WriteFile(filepath.Join(d, "agents/a.toml"), []byte("name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"rm_rf\"]\n"), 0o644)
		}, "lev.agents: {d}/agents/a.toml"},
		{"blueprint in a subdir: unknown key", func(d string) {
			os.WriteFile(filepath.Join(d, "agents/b/blueprint.toml"), []byte("name = \"b\"\nversoin = \"1\"\n"), 0o644)
		}, "lev.agents: {d}/agents/b/blueprint.toml:2"},
		{"agents: symlink (could lead into the tree)", func(d string) {
			os.Symlink("/etc/passwd", filepath.Join(d, "agents/c.toml"))
		}, "lev.agents: {d}/agents/c.toml is a symlink"},
		{"agents: hard link (a tree file under another name)", func(d string) {
			os.Link(filepath.Join(d, "agents/b/seed.txt"), filepath.Join(d, "tree-file"))
		}, "has 2 hard links"},
		{"policy: unknown key", func(d string) {
			os.WriteFile(filepath.Join(d, "policy.toml"), []byte("defualt = \"deny\"\n"), 0o644)
		}, "lev.policy: "},
		{"over the size cap", func(d string) {
			os.WriteFile(filepath.Join(d, "agents/big.bin"), make([]byte, MaxBytes), 0o644)
		}, "exceed 4194304 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			for f, body := range good {
				os.MkdirAll(filepath.Dir(filepath.Join(d, f)), 0o755)
				os.WriteFile(filepath.Join(d, f), []byte(body), 0o644)
			}
			tc.mod(d)
			b, err := Load(Paths{Config: filepath.Join(d, "lev.toml"), Agents: filepath.Join(d, "agents"), Policy: filepath.Join(d, "policy.toml")})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(b.Agents) != 3 || !b.HasPolicy || string(b.Config) != good["lev.toml"] {
					t.Fatalf("bundle %+v", b)
				}
				return
			}
			want := strings.ReplaceAll(tc.want, "{d}", d)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error containing %q", err, want)
			}
		})
	}
}

// TestHash: any byte, name or the policy's presence changes it; map order does not.
func TestHash(t *testing.T) {
	base := func() *Bundle {
		return &Bundle{Config: []byte("c"), Agents: map[string][]byte{"a.toml": []byte("x"), "b.toml": []byte("y")}}
	}
	h := base().Hash()
	if base().Hash() != h {
		t.Fatal("hash not stable")
	}
	mods := map[string]func(*Bundle){
		"config byte":   func(b *Bundle) { b.Config = []byte("d") },
		"agent renamed": func(b *Bundle) { b.Agents["c.toml"] = b.Agents["b.toml"]; delete(b.Agents, "b.toml") },
		"agent added":   func(b *Bundle) { b.Agents["z.toml"] = nil },
		"empty policy":  func(b *Bundle) { b.HasPolicy = true },
		"bytes moved":   func(b *Bundle) { b.Config = []byte("cx"); b.Agents["a.toml"] = nil },
	}
	for name, m := range mods {
		b := base()
		m(b)
		if b.Hash() == h {
			t.Errorf("%s: hash unchanged", name)
		}
	}
}

func TestCheckRelative(t *testing.T) {
	for rel, ok := range map[string]bool{"a.toml": true, "b/blueprint.toml": true, "../x": false, "/etc/x": false, "a/../../x": false, "": false, ".": false, "a//b": false} {
		if (CheckRelative(rel) == nil) != ok {
			t.Errorf("%q: ok=%v", rel, !ok)
		}
	}
}
