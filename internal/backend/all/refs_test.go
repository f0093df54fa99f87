package all

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend"
)

// TestMatrixPointsAtDocsInTheTree: what `lever backends` prints for every registered
// backend names no document that is not in the tree ("spec 2.1", "DESIGN.md", "issue 6"),
// and every docs/ file it points at exists. The positive control: the matrix does point
// at docs/ (so the existence check runs on real references), and the pattern catches the
// old spelling of the netns caveat.
func TestMatrixPointsAtDocsInTheTree(t *testing.T) {
	gone := regexp.MustCompile(`(?i)\bspec(ification)? §?\d|\bDESIGN\.md\b|\bissue \d`)
	docRef := regexp.MustCompile(`docs/[A-Za-z0-9_./-]+\.md`)
	if !gone.MatchString("no filesystem bound: the project-tree-only guarantee (spec 2.1) does not hold") {
		t.Fatal("the pattern misses the old caveat")
	}
	root := filepath.Join("..", "..", "..")
	refs := 0
	for _, d := range backend.All() {
		p := d.Profile
		for _, s := range append([]string{p.Kernel, p.FilesystemBound, p.EgressEnforced, p.RootlessRuntime}, p.Caveats...) {
			if m := gone.FindString(s); m != "" {
				t.Errorf("%s: %q names %q, a document not in the tree", p.Name, s, m)
			}
			for _, ref := range docRef.FindAllString(s, -1) {
				refs++
				if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(ref, "."))); err != nil {
					t.Errorf("%s: %q points at %s: %v", p.Name, s, ref, err)
				}
			}
		}
	}
	if refs == 0 {
		t.Fatal("no backend's matrix row points at docs/: the existence check ran on nothing")
	}
}
