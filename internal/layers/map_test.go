package layers

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/testutil"
)

var updateMap = flag.Bool("update-map", false, "rewrite docs/architecture.md's generated import map from the real graph")

const (
	mapBegin = "<!-- begin import map: generated from `go list` by internal/layers (go test ./internal/layers -run TestArchitectureMap -update-map); do not edit -->"
	mapEnd   = "<!-- end import map -->"
)

// rowOf names the row a package is drawn in: lev's runtime is one row (docs/lev.md maps
// it inside); every other package is its own.
func rowOf(pkg string) string {
	if i, _ := layerOf(pkg); layers[i].name == "lev runtime" {
		return "internal/lev/..."
	}
	return pkg
}

// importMap renders the graph as the page draws it, top layer first: per layer the layers it
// imports, then per package (row) its direct imports from the module. Test helpers and
// tools are left out; TestEveryImportGoesDown holds that nothing imports them.
func importMap(g graph) string {
	var b strings.Builder
	tests := len(layers) - 1
	b.WriteString("```\n")
	for i := tests - 1; i >= 0; i-- {
		seen := map[int]bool{}
		for pkg, imps := range g {
			if l, _ := layerOf(pkg); l != i {
				continue
			}
			for _, imp := range imps {
				if to, ok := layerOf(imp); ok && to != i {
					seen[to] = true
				}
			}
		}
		var to []string
		for j := tests - 1; j >= 0; j-- {
			if seen[j] {
				to = append(to, layers[j].name)
			}
		}
		arrow := "──> " + strings.Join(to, ", ")
		if len(to) == 0 {
			arrow = "(imports no other layer)"
		}
		fmt.Fprintf(&b, "%-14s %s\n", layers[i].name, arrow)
	}
	b.WriteString("```\n\n| layer | package | imports from the module (direct, non-test files) |\n|---|---|---|\n")
	for i := tests - 1; i >= 0; i-- {
		rows := map[string]map[string]bool{}
		for pkg, imps := range g {
			if l, _ := layerOf(pkg); l != i {
				continue
			}
			row := rowOf(pkg)
			if rows[row] == nil {
				rows[row] = map[string]bool{}
			}
			for _, imp := range imps {
				if rowOf(imp) != row {
					rows[row][imp] = true
				}
			}
		}
		var names []string
		for r := range rows {
			names = append(names, r)
		}
		sort.Strings(names)
		for _, r := range names {
			var imps []string
			for imp := range rows[r] {
				imps = append(imps, strings.TrimPrefix(imp, "internal/"))
			}
			sort.Strings(imps)
			list := "`" + strings.Join(imps, "`, `") + "`"
			if len(imps) == 0 {
				list = "none"
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s |\n", layers[i].name, r, list)
		}
	}
	return b.String()
}

// ownsRow is a row of the page's hand-written "owns" table: `| layer | packages | owns |`.
var ownsRow = regexp.MustCompile("(?m)^\\| ([a-z -]+) \\| ((?:`[^`]+`(?:, )?)+) \\|")

// TestArchitectureMap holds docs/architecture.md to the real import graph: the generated
// map between its markers must be what the graph renders today (-update-map rewrites it),
// and the hand-written table of what each layer owns must list the layers in the table's
// order with exactly their packages.
func TestArchitectureMap(t *testing.T) {
	g := moduleGraph(t)
	path := filepath.Join(testutil.RepoRoot(t), "docs", "architecture.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	begin, end := strings.Index(page, mapBegin), strings.Index(page, mapEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no generated import map between %q and %q", path, mapBegin, mapEnd)
	}
	want := importMap(g)
	if !strings.Contains(want, "| bring-up | `internal/bringup` |") {
		t.Fatalf("the rendered map lacks bring-up's row: the renderer is broken:\n%s", want)
	}
	got := page[begin+len(mapBegin)+1 : end]
	if got != want {
		if *updateMap {
			page = page[:begin+len(mapBegin)+1] + want + page[end:]
			if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote %s", path)
		} else {
			t.Errorf("docs/architecture.md's import map is not the real graph; rerun with -update-map and read the diff. Want:\n%s", want)
		}
	}

	rows := ownsRow.FindAllStringSubmatch(page[end:], -1)
	var names []string
	for _, r := range rows {
		names = append(names, r[1])
	}
	var wantNames []string
	for _, l := range layers {
		wantNames = append(wantNames, l.name)
	}
	if strings.Join(names, "|") != strings.Join(wantNames, "|") {
		t.Fatalf("the owns table's layers are\n  %q\nthe layer table's (bottom-up) are\n  %q", names, wantNames)
	}
	for i, r := range rows {
		var pkgs []string
		for _, p := range strings.Split(r[2], ", ") {
			pkgs = append(pkgs, strings.Trim(p, "`"))
		}
		if strings.Join(pkgs, " ") != strings.Join(layers[i].pkgs, " ") {
			t.Errorf("owns table, layer %s: packages %q, the layer table has %q", r[1], pkgs, layers[i].pkgs)
		}
	}
}
