package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinarySeedsAreCappedTogether drives `lev run` (the built binary): a blueprint's glob
// seed matches whatever the workdir holds, and an agent writes the workdir, so an earlier
// run can leave megabyte files or thousands of them for the next spawn's first message.
// Past the 4 MiB content cap (MaxSeedTotal) or the 1000-file cap (MaxSeedFiles) the spawn
// is refused naming the cap (before the fix all were read into memory and the record).
// Controls: 3 files of 1 MiB, and 1000 small files, seed the run, whose answer (the first
// message, submitted back) holds the last file's marker.
func TestBinarySeedsAreCappedTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	for _, c := range []struct {
		name        string
		files, size int
		refusal     string // "" = the run is seeded and completes
	}{
		{"content over the cap", 5, 1 << 20, "over the 4 MiB seed cap (MaxSeedTotal)"},
		{"files over the cap", 1001, 16, "over the 1000-file seed cap (MaxSeedFiles)"},
		{"control: content under the cap", 3, 1 << 20, ""},
		{"control: files at the cap", 1000, 16, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBox(t, bin, "lev", "")
			dir := filepath.Join(b.wd, "seeds")
			os.MkdirAll(dir, 0o755)
			last := ""
			for i := range c.files {
				last = fmt.Sprintf("FILE-%04d-", i)
				body := last + strings.Repeat("x", c.size-len(last))
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d.txt", i)), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			mustWrite(t, b.script, modelScript("submit-last.toml"))
			b.agent("seeder", "name = \"seeder\"\nversion = \"1\"\n[[seeds]]\nglob = \"seeds/*.txt\"\n[stages.s]\ntools = [\"submit_output\"]\n")
			out, stderr, code := b.lev("run", "seeder", "--workdir", b.wd)
			if c.refusal != "" {
				if code == 0 || !strings.Contains(stderr, c.refusal) || !strings.Contains(stderr, `seed 1 (glob "seeds/*.txt")`) {
					t.Fatalf("exit %d, stderr %.2000s; want a refusal naming %q", code, stderr, c.refusal)
				}
				return
			}
			if code != 0 || !strings.Contains(out, last) {
				t.Fatalf("exit %d (want 0 with %q in the answer), stderr %.2000s", code, last, stderr)
			}
		})
	}
}
