package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelativeLevPolicyRefused: lev pinned a relative $LEV_POLICY against the directory
// each command started in, so `lev policy test` (run in one directory) and the daemon
// (started by a `lev run` in another) read two different policy files while the dry run
// claimed to show what the live run does. Through the real binary: a relative value fails
// lev policy test and lev run, naming the variable; the control is the absolute spelling
// of the same file, whose deny rule lev policy test must show. A LEV_PROTECT entry starting
// with "~" (set without a shell, nothing expands it) is refused the same way.
func TestRelativeLevPolicyRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	b := newBox(t, bin, "lev", "")
	b.agent("prober", proberBlueprint)
	mustWrite(t, filepath.Join(b.root, "pol.toml"), "default = \"deny\"\n")
	mustWrite(t, b.script, probeCall("read_file", `{"path": "notes.txt"}`))
	for _, r := range []struct {
		name, value string
		args        []string
		ok          bool
		want        string
	}{
		{"lev policy test, relative", "pol.toml", []string{"policy", "test", "shell", "--target", "curl x"}, false, `LEV_POLICY="pol.toml": must be an absolute path`},
		{"lev run, relative", "./pol.toml", []string{"run", "prober", "--workdir", b.wd}, false, `LEV_POLICY="./pol.toml": must be an absolute path`},
		{"LEV_PROTECT with ~", "", []string{"policy", "test", "shell"}, false, `$LEV_PROTECT="~/worker/.lev": "~" is not expanded`},
		{"control: lev policy test, absolute", filepath.Join(b.root, "pol.toml"), []string{"policy", "test", "shell", "--target", "curl x"}, true, "deny (default)"},
	} {
		t.Run(r.name, func(t *testing.T) {
			kv := "LEV_POLICY=" + r.value
			if r.value == "" {
				kv = "LEV_PROTECT=~/worker/.lev"
			}
			b.env = append(b.env[:len(b.env):len(b.env)], kv)
			defer func() { b.env = b.env[:len(b.env)-1] }()
			out, stderr, code := b.lev(r.args...)
			if (code == 0) != r.ok || !strings.Contains(out+stderr, r.want) {
				t.Fatalf("exit %d, want ok=%v and %q\nstdout %s\nstderr %s", code, r.ok, r.want, out, stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(b.home, "runs")); err == nil {
		ents, _ := os.ReadDir(filepath.Join(b.home, "runs"))
		if len(ents) != 0 {
			t.Fatalf("a run was spawned under a relative LEV_POLICY: %v", ents)
		}
	}
}
