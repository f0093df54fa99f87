package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShellCannotRenameAwayLevState: masks are mounts on a path; a shell command that
// renames a parent directory carries the mask away with the old name, then makes the path
// again with files of its own (a worker's config.toml, lev's own config.toml under a
// nested $LEV_HOME) that lev loads later. Through the real binary, shell under kind none.
// Each row runs the attack on lev's state and, in the same command, the same rename on a
// sibling that is not lev's (the control: renames there work).
func TestShellCannotRenameAwayLevState(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	for _, r := range []struct {
		name    string
		home    string // LEV_HOME relative to the box root
		protect string // LEV_PROTECT relative to the box root, or ""
		target  string // the protected config.toml, relative to the box root
		cmd     string // run in the workdir; must also rename ../sib/d (the control)
	}{
		{"a worker's lev home (LEV_PROTECT) in the workdir", "lev", "wd/workers/w1/.lev", "wd/workers/w1/.lev/config.toml",
			"mv workers/w1 workers/w1x; mkdir -p workers/w1/.lev; echo EVIL > workers/w1/.lev/config.toml; mv ../sib/d ../sib/d2"},
		{"lev's home nested outside the workdir", "cfg/lev", "", "cfg/lev/config.toml",
			"mv ../cfg ../cfg2; mkdir -p ../cfg/lev; echo EVIL > ../cfg/lev/config.toml; mv ../sib/d ../sib/d2"},
	} {
		t.Run(r.name, func(t *testing.T) {
			var extra []string
			if r.protect != "" {
				extra = append(extra, "LEV_PROTECT="+r.protect)
			}
			b := newBox(t, bin, r.home, "[tool_permissions]\nshell = \"allow\"\n", extra...)
			b.agent("prober", proberBlueprint)
			target := filepath.Join(b.root, r.target)
			if _, err := os.Stat(target); err != nil {
				mustWrite(t, target, "ORIG")
			}
			before, _ := os.ReadFile(target)
			os.MkdirAll(filepath.Join(b.root, "sib", "d"), 0o755)
			mustWrite(t, b.script, probeCall("shell", `{"command": `+jsonArg(r.cmd+"; cat notes.txt")+`}`))
			out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
			if after, _ := os.ReadFile(target); string(after) != string(before) {
				t.Fatalf("%s changed from %q to %q (lev's state renamed away and replaced):\n%s\n%s", target, before, after, out, stderr)
			}
			if code != 0 || !strings.Contains(out, "notes content") {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, stderr)
			}
			if _, err := os.Stat(filepath.Join(b.root, "sib", "d2")); err != nil {
				t.Fatalf("control: the rename of a directory that is not lev's failed:\n%s", out)
			}
		})
	}
}
