package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestTreeStateDoesNotLockOut: an agent swaps what lever.yaml names in the tree (the
// blueprint, a read-only path, a worker's dir) for a link out of the tree, or a loop.
// ps, logs, result, run and shell keep working (exit 0) and warn, naming the key and the
// file; lever up still refuses (exit 2), naming it. The control is the same jail before
// the swap: no warning at all, so the warning comes from the swap.
func TestTreeStateDoesNotLockOut(t *testing.T) {
	swaps := []struct {
		name string
		swap func(t *testing.T, proj string)
		want string
	}{
		{"the blueprint a link out of the tree", func(t *testing.T, proj string) {
			bp := filepath.Join(proj, ".lev", "agents", "starter.toml")
			os.Remove(bp)
			if err := os.Symlink("/etc/passwd", bp); err != nil {
				t.Fatal(err)
			}
		}, `lev.blueprint: ".lev/agents/starter.toml" resolves to /etc/passwd, outside the tree`},
		{"the .lev dir a link out of the tree", func(t *testing.T, proj string) {
			os.RemoveAll(filepath.Join(proj, ".lev"))
			if err := os.Symlink(t.TempDir(), filepath.Join(proj, ".lev")); err != nil {
				t.Fatal(err)
			}
		}, `lev.blueprint: ".lev/agents/starter.toml" resolves to`},
		{"a read-only path a symlink loop", func(t *testing.T, proj string) {
			os.RemoveAll(filepath.Join(proj, "ro"))
			if err := os.Symlink("ro", filepath.Join(proj, "ro")); err != nil {
				t.Fatal(err)
			}
		}, `manager.read_only[0]: cannot resolve "ro"`},
		{"a worker's dir the whole tree", func(t *testing.T, proj string) {
			os.RemoveAll(filepath.Join(proj, "docs"))
			if err := os.Symlink(".", filepath.Join(proj, "docs")); err != nil {
				t.Fatal(err)
			}
		}, `workers[0].dir: "docs" is the whole tree`},
	}
	verbs := [][]string{
		{"ps"}, {"logs", "r-20261130-100000-aaaaaa"}, {"result", "r-20261130-100000-aaaaaa"},
		{"run", "--detach"}, {"shell", "--", "true"},
	}
	for _, sw := range swaps {
		t.Run(sw.name, func(t *testing.T) {
			rec := &recorder{runs: map[string]string{mgrC: runsM, docsC: runsW1}, bench: map[string]bool{mgrC + "-bench": true}}
			cfg := unitJail(t, rec)
			proj := filepath.Dir(cfg)
			os.MkdirAll(filepath.Join(proj, ".lev", "agents"), 0o755)
			os.MkdirAll(filepath.Join(proj, "ro"), 0o755)
			os.WriteFile(filepath.Join(proj, ".lev", "agents", "starter.toml"), []byte("name = \"starter\"\n"), 0o644)
			os.WriteFile(cfg, []byte("name: unit\nbackend: netns\nmanager:\n  read_only: [ro]\nworkers:\n  - name: docs\n    dir: docs\nbroker:\n  llm_auth: subscription\nlev:\n  blueprint: .lev/agents/starter.toml\n"), 0o644)
			for _, v := range verbs {
				if code, out, errs := lever(withConfig(v, cfg)...); code != 0 || strings.Contains(errs, "warning") {
					t.Fatalf("control %v before the swap: exit %d %s%s", v, code, out, errs)
				}
			}
			sw.swap(t, proj)
			for _, v := range verbs {
				code, out, errs := lever(withConfig(v, cfg)...)
				if code != 0 {
					t.Errorf("%v: exit %d, locked out: %s%s", v, code, out, errs)
				}
				if !strings.Contains(errs, "lever: warning: "+cfg) || !strings.Contains(errs, sw.want) {
					t.Errorf("%v: stderr %q, want a warning naming %q", v, errs, sw.want)
				}
			}
			code, _, errs := lever("up", "-c", cfg)
			if code != 2 || !strings.Contains(errs, sw.want) {
				t.Errorf("up: exit %d %q, want 2 naming %q", code, errs, sw.want)
			}
		})
	}
}

// TestConfigReadBounded: a lever.yaml made a FIFO (nobody writes it: a read would wait
// forever) or a 10 GiB sparse file is refused at once by the state verbs and lever up,
// exit 2, naming the file (and the cap); the control is the same verbs on the real file.
func TestConfigReadBounded(t *testing.T) {
	cases := []struct {
		name  string
		plant func(t *testing.T, p string)
		want  string
	}{
		{"control: the file itself", func(t *testing.T, p string) {}, ""},
		{"a FIFO", func(t *testing.T, p string) {
			os.Remove(p)
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Skip(err)
			}
		}, "is not a regular file (a FIFO)"},
		{"a 10 GiB sparse file", func(t *testing.T, p string) {
			if err := os.Truncate(p, 10<<30); err != nil {
				t.Fatal(err)
			}
		}, "is 10737418240 bytes, more than the 1048576 lever reads from it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{runs: map[string]string{mgrC: runsM, docsC: runsW1}}
			cfg := unitJail(t, rec)
			tc.plant(t, cfg)
			verbs := [][]string{{"ps"}, {"result", "r-20261130-100000-aaaaaa"}}
			if tc.want != "" {
				verbs = append(verbs, []string{"up"}) // refused reading its config: nothing is brought up
			}
			for _, v := range verbs {
				code, out, errs := lever(withConfig(v, cfg)...)
				if tc.want == "" {
					if code != 0 {
						t.Errorf("control %v: exit %d %s%s", v, code, out, errs)
					}
					continue
				}
				if code != 2 || !strings.Contains(errs, cfg+" "+tc.want) {
					t.Errorf("%v: exit %d %q, want 2 naming %s %q", v, code, errs, cfg, tc.want)
				}
			}
		})
	}
}
