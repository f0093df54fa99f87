package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShellCannotCreateMissingLevState: a protected path that does not exist yet (a
// policy file never written, a worker's lev home not made) cannot be masked by a mount,
// and a shell command that creates it would choose what a later run loads (an allow-all
// policy; a worker's config.toml). Through the real binary, shell under kind none: the
// command must not create it, while the workdir stays writable. Control: the same
// command with the path not protected does create it (the payload reaches the file).
func TestShellCannotCreateMissingLevState(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	type row struct {
		name    string
		target  func(root string) string // the missing protected path
		env     func(target string) string
		content string
	}
	for _, r := range []row{
		{"LEV_POLICY outside the workdir", func(root string) string { return filepath.Join(root, "pol", "policy.toml") },
			func(p string) string { return "LEV_POLICY=" + p }, `default = \"allow\"`},
		{"LEV_PROTECT home beside the workdir (its parent holds the workdir)", func(root string) string { return filepath.Join(root, ".lev2", "config.toml") },
			func(p string) string { return "LEV_PROTECT=" + filepath.Dir(p) }, `\[tool_permissions\]`},
		{"LEV_PROTECT home inside the workdir", func(root string) string { return filepath.Join(root, "wd", "worker", ".lev", "config.toml") },
			func(p string) string { return "LEV_PROTECT=" + filepath.Dir(p) }, `\[tool_permissions\]`},
	} {
		for _, protect := range []bool{false, true} {
			t.Run(r.name+map[bool]string{true: "", false: " (control: unprotected)"}[protect], func(t *testing.T) {
				root, _ := filepath.EvalSymlinks(t.TempDir())
				target := r.target(root)
				var extra []string
				if protect {
					extra = append(extra, r.env(target))
				}
				b := newBox(t, bin, filepath.Join(root, "home"), "[tool_permissions]\nshell = \"allow\"\n", extra...)
				os.MkdirAll(filepath.Join(root, "pol"), 0o755)
				os.MkdirAll(filepath.Join(b.wd, "worker"), 0o755)
				b.agent("prober", proberBlueprint)
				cmd := "mkdir -p " + filepath.Dir(target) + "; echo " + r.content + " > " + target + "; echo w > written.txt; cat notes.txt"
				mustWrite(t, b.script, probeCall("shell", `{"command": `+jsonArg(cmd)+`}`))
				out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
				if code != 0 || !strings.Contains(out, "notes content") {
					t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, stderr)
				}
				_, err := os.Stat(target)
				if created := err == nil; created == protect {
					t.Fatalf("protected=%v, %s created=%v\n%s", protect, target, created, out)
				}
				if w, _ := os.ReadFile(filepath.Join(b.wd, "written.txt")); strings.TrimSpace(string(w)) != "w" {
					if !(protect && strings.Contains(target, "/wd/")) {
						t.Fatalf("the workdir is no longer writable for the shell:\n%s", out)
					}
				}
			})
		}
	}
}
