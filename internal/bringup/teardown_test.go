package bringup

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

// TestRemoveStateDirRefusesTheTree: destroy removes the instance's state directory unless
// the project tree lies inside it (fspath.Within on the resolved directory). The refused
// rows are a tree inside the state dir, spelled directly and reached through a symlinked
// state dir; the accepted rows are trees beside it that share its name as a prefix, so
// the same removal runs and a prefix match would have wrongly refused them.
func TestRemoveStateDirRefusesTheTree(t *testing.T) {
	cases := []struct {
		name    string
		link    bool   // the state dir is a symlink to <tmp>/real
		tree    string // relative to <tmp>
		refused bool
	}{
		{"tree inside the state dir", false, "state/x/proj", true},
		{"tree is the state dir", false, "state/x", true},
		{"tree inside the symlinked state dir's target", true, "real/proj", true},
		{"tree beside the state dir, sharing its prefix", false, "state/x2", false},
		{"tree beside the symlink target, sharing its prefix", true, "real2/proj", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("LEVER_STATE_DIR", filepath.Join(tmp, "state"))
			dir := filepath.Join(tmp, "state", "x")
			if err := os.MkdirAll(filepath.Join(tmp, "state"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.link {
				if err := os.MkdirAll(filepath.Join(tmp, "real"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(tmp, "real"), dir); err != nil {
					t.Fatal(err)
				}
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "broker.pid"), []byte("1"), 0o644); err != nil {
				t.Fatal(err)
			}
			tree := filepath.Join(tmp, tc.tree)
			if err := os.MkdirAll(tree, 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := &config.Config{Name: "x", TreePath: tree}
			removed, _, err := removeStateDir(cfg)
			_, statErr := os.Lstat(dir)
			if tc.refused {
				if err == nil || removed || statErr != nil {
					t.Fatalf("removed=%v err=%v stat=%v: want refused with the state dir left in place", removed, err, statErr)
				}
				return
			}
			if err != nil || !removed || !os.IsNotExist(statErr) {
				t.Fatalf("removed=%v err=%v stat=%v: want the state dir removed", removed, err, statErr)
			}
		})
	}
}
