package docrefs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/testutil"
)

// cited matches a test or fuzz target named in prose, optionally qualified by its package
// (`brokerctl.TestX`); a subtest suffix (`TestX/row`) is not part of the match.
var cited = regexp.MustCompile(`\b(?:([a-z][a-z0-9_]*)\.)?((?:Test|Fuzz)[A-Z0-9_][A-Za-z0-9_]*)`)

// definedTests maps each top-level Test/Fuzz function in the module's _test.go files to
// the names a document may qualify it with: its package clause and its directory's name.
func definedTests(t *testing.T, root string) map[string]map[string]bool {
	t.Helper()
	defs := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "bin" || name == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := strings.TrimSuffix(f.Name.Name, "_test")
		dir := filepath.Base(filepath.Dir(path))
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv != nil {
				continue
			}
			name := fd.Name.Name
			if !strings.HasPrefix(name, "Test") && !strings.HasPrefix(name, "Fuzz") {
				continue
			}
			if defs[name] == nil {
				defs[name] = map[string]bool{}
			}
			defs[name][pkg] = true
			defs[name][dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the module's tests: %v", err)
	}
	return defs
}

func documents(t *testing.T, root string) []string {
	t.Helper()
	docs := []string{filepath.Join(root, "SECURITY.md"), filepath.Join(root, "README.md")}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(docs, more...)
}

func TestCitedTestsExist(t *testing.T) {
	root := testutil.RepoRoot(t)
	defs := definedTests(t, root)
	if len(defs) < 100 {
		// Positive control: the walk found the module's tests (this very test among them).
		t.Fatalf("found only %d test functions: the walk is broken", len(defs))
	}
	if !defs["TestCitedTestsExist"]["docrefs"] {
		t.Fatal("the walk did not find this test under its own package: the index is wrong")
	}
	var missing []string
	total := 0
	for _, doc := range documents(t, root) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatalf("reading %s: %v", doc, err)
		}
		rel, _ := filepath.Rel(root, doc)
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range cited.FindAllStringSubmatch(line, -1) {
				total++
				pkg, name := m[1], m[2]
				where, ok := defs[name]
				switch {
				case !ok:
					missing = append(missing, rel+":"+itoa(i+1)+": "+m[0]+" (no such test)")
				case pkg != "" && !where[pkg]:
					missing = append(missing, rel+":"+itoa(i+1)+": "+m[0]+" (not in package "+pkg+": in "+keys(where)+")")
				}
			}
		}
	}
	if total < 100 {
		t.Fatalf("found only %d citations in the documents: the pattern is broken", total)
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d cited tests do not exist:\n%s", len(missing), total, strings.Join(missing, "\n"))
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func keys(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
