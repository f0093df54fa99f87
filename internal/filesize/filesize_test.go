package filesize

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const limit = 600

// over is the shrinking allowlist: files another change is splitting as this test lands
// (internal/brokerctl), each with the length it had then. A listed file
// may not grow, and the test fails once it is under the limit so its row is deleted; the
// list only shrinks, and when it is empty the limit has no exceptions.
var over = map[string]int{}

// lengths is each non-test .go file under root (slash-separated, relative) and its line count.
func lengths(t *testing.T, root string) map[string]int {
	t.Helper()
	out := map[string]int{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = bytes.Count(data, []byte("\n"))
		return nil
	})
	if err != nil {
		t.Fatalf("walking the module: %v", err)
	}
	return out
}

// findings is what breaks the limit in files, given the allowlist.
func findings(files, allowed map[string]int) []string {
	var out []string
	for f, n := range files {
		max, listed := allowed[f]
		switch {
		case listed && n <= limit:
			out = append(out, f+" is "+itoa(n)+" lines, under the limit: delete its row from the allowlist")
		case listed && n > max:
			out = append(out, f+" grew to "+itoa(n)+" lines (allowed "+itoa(max)+" while it is split)")
		case !listed && n > limit:
			out = append(out, f+" is "+itoa(n)+" lines, over "+itoa(limit)+": split it by concern")
		}
	}
	for f := range allowed {
		if _, ok := files[f]; !ok {
			out = append(out, f+" is allowlisted but gone: delete its row")
		}
	}
	sort.Strings(out)
	return out
}

func TestNoFileOverTheLimit(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files := lengths(t, root)
	if files["internal/filesize/doc.go"] == 0 || len(files) < 200 {
		t.Fatalf("the walk found %d files and not this package's doc.go: it is broken", len(files))
	}
	// Positive control: a long file, a grown listed one, a listed one now short, a gone one.
	planted := findings(map[string]int{"a.go": limit + 1, "b.go": 700, "c.go": 10, "ok.go": limit}, map[string]int{"b.go": 650, "c.go": 700, "d.go": 900})
	if len(planted) != 4 {
		t.Fatalf("the check found %q in the planted set, want 4 findings", planted)
	}
	for _, f := range findings(files, over) {
		t.Error(f)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
