package runner

import (
	"os"
	"path/filepath"
	"testing"
)

// TestInWorkdir: a blueprint in the run's tree is the tree's (foreign); anything else is
// the user's and stays protected. A workdir of / must not swallow every blueprint.
func TestInWorkdir(t *testing.T) {
	wd := t.TempDir()
	home := t.TempDir()
	in := filepath.Join(wd, "bp.toml")
	out := filepath.Join(home, "bp.toml")
	for _, f := range []string{in, out} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(wd, "link.toml")
	if err := os.Symlink(out, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file, dir string
		want            bool
	}{
		{"in the tree", in, wd, true},
		{"outside the tree", out, wd, false},
		{"a sibling sharing the prefix", wd + "x/bp.toml", wd, false},
		{"a link in the tree (as spelled)", link, wd, true},
		{"no workdir", in, "", false},
		{"workdir / holds no blueprint", out, "/", false},
		{"workdir / spelled //", out, "//", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := inWorkdir(tt.file, tt.dir); got != tt.want {
				t.Errorf("inWorkdir(%q, %q) = %v, want %v", tt.file, tt.dir, got, tt.want)
			}
		})
	}
}
