package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBlueprintSeedCannotReadLevHome: a "blueprint:" seed reads the blueprint's own
// directory, which was exempt from lev's protection whenever a protected entry held it.
// That is right for agents/NAME.toml (the agents directory holds only blueprints), but a
// blueprint kept in $LEV_HOME itself and run by its path had lev's home as its "own
// directory": daemon.log and the label store read as shipped text. Through the real
// binary: the spawn must be refused naming lev's state. Control: the same seed shape
// reading a file shipped beside a blueprint in the agents directory spawns and runs.
func TestBlueprintSeedCannotReadLevHome(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	b := newBox(t, bin, "lev", "")
	bp := func(seed string) string {
		return "name = \"shipper\"\nversion = \"1\"\n[[seeds]]\nfile = \"blueprint:" + seed + "\"\n[stages.probe]\ntools = [\"submit_output\"]\n"
	}
	mustWrite(t, b.script, modelScript("submit-submitted.toml"))
	mustWrite(t, filepath.Join(b.home, "agents", "shipper", "notes.md"), "shipped notes")
	mustWrite(t, filepath.Join(b.home, "agents", "shipper", "blueprint.toml"), bp("notes.md"))
	// Start the daemon (and its log) with the control run.
	if out, stderr, code := b.lev("run", "shipper", "--workdir", b.wd, "--yolo"); code != 0 || !strings.Contains(out, "submitted") {
		t.Fatalf("control: exit %d\n%s\n%s", code, out, stderr)
	}
	for _, seed := range []string{"daemon.log", "taint-labels.json", "daemon.pid"} {
		t.Run(seed, func(t *testing.T) {
			file := filepath.Join(b.home, "mine.toml")
			mustWrite(t, file, bp(seed))
			out, stderr, code := b.lev("run", file, "--workdir", b.wd, "--yolo")
			if code == 0 || !strings.Contains(stderr, "lev's own state") {
				t.Fatalf("blueprint in LEV_HOME read %s: exit %d\nstdout %s\nstderr %s", seed, code, out, stderr)
			}
		})
	}
}
