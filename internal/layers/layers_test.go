package layers

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// layer is one row of the map: a name and the packages in it. A pattern ending in "/..."
// is that directory's packages and their subpackages.
type layer struct {
	name string
	pkgs []string
}

// layers is the map, bottom-up: a package imports only packages of its own layer or of
// layers listed before it. The last layer, tests and tools, may import anything and no
// other layer may import it.
var layers = []layer{
	{"leaves", []string{"internal/tail", "internal/fspath", "internal/exitcode", "internal/hostterm", "internal/version", "internal/beneath", "internal/secretfile", "templates"}},
	{"egress", []string{"internal/egress"}},
	{"host inputs", []string{"internal/config", "internal/keyfile", "internal/hosttrust"}},
	{"cap", []string{"internal/cap/ca", "internal/cap/ticket", "internal/brokerclient"}},
	{"guest", []string{"internal/guest"}},
	{"backend", []string{"internal/backend", "internal/backend/forwardrec", "internal/backend/lima", "internal/backend/netns", "internal/backend/orbstack", "internal/backend/all"}},
	{"provision", []string{"internal/provision"}},
	{"containers", []string{"internal/containers"}},
	{"images", []string{"internal/levimage", "internal/levimage/debroot"}},
	{"lev runtime", []string{"internal/lev/..."}},
	{"settings", []string{"internal/levsettings"}},
	{"guest helpers", []string{"internal/guestside", "internal/guestside/enrol", "internal/guestside/imagebuild", "internal/guestside/mountcheck", "internal/guestside/probes", "internal/guestside/runas"}},
	{"lev", []string{"internal/lev/cli", "cmd/lev"}},
	{"broker", []string{"internal/brokerctl", "internal/brokerctl/keymask", "internal/brokerctl/keymask/keymasktest", "internal/brokerctl/bodypolicy", "internal/brokerctl/limits"}},
	{"acceptance", []string{"internal/acceptance"}},
	{"doctor", []string{"internal/doctor"}},
	{"dashboard", []string{"internal/dashboard"}},
	{"bring-up", []string{"internal/bringup"}},
	{"cli", []string{"internal/cli", "cmd/lever"}},
	{"tests and tools", []string{"internal/testutil", "internal/testutil/browser", "internal/guest/guesttest", "internal/levimage/levtest", "internal/lev/levtest", "internal/lev/sandbox/sbxtest", "internal/backend/orbstack/wholeflow", "internal/docrefs", "internal/maketest", "internal/layers", "internal/filesize", "tools/benchtable", "examples/hello/src"}},
}

// layerOf places a package: an exact entry wins over a "/..." pattern, so lev's CLI and
// its test helpers sit apart from the runtime they belong under.
func layerOf(pkg string) (int, bool) {
	for i, l := range layers {
		for _, p := range l.pkgs {
			if p == pkg {
				return i, true
			}
		}
	}
	for i, l := range layers {
		for _, p := range l.pkgs {
			if dir, ok := strings.CutSuffix(p, "/..."); ok && (pkg == dir || strings.HasPrefix(pkg, dir+"/")) {
				return i, true
			}
		}
	}
	return 0, false
}

// violations lists what in g breaks the layer table: a package in no layer, a layer entry
// naming no package, an import going up, a production package importing a test helper.
func violations(g graph) []string {
	var out []string
	tests := len(layers) - 1
	var pkgs []string
	for p := range g {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		from, ok := layerOf(p)
		if !ok {
			out = append(out, fmt.Sprintf("%s is in no layer: place it in layers_test.go and docs/architecture.md", p))
			continue
		}
		if from == tests {
			continue
		}
		for _, imp := range g[p] {
			to, ok := layerOf(imp)
			switch {
			case !ok:
				// reported as the imported package's own row
			case to == tests:
				out = append(out, fmt.Sprintf("%s (%s) imports the test helper %s", p, layers[from].name, imp))
			case to > from:
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s), a layer above it", p, layers[from].name, imp, layers[to].name))
			}
		}
	}
	for _, l := range layers {
		for _, p := range l.pkgs {
			found := false
			for q := range g {
				if q == p || strings.HasSuffix(p, "/...") && strings.HasPrefix(q, strings.TrimSuffix(p, "...")) {
					found = true
					break
				}
			}
			if !found {
				out = append(out, fmt.Sprintf("layer %s names %s, which is no package", l.name, p))
			}
		}
	}
	return out
}

// TestEveryImportGoesDown holds the real import graph to the layer table.
func TestEveryImportGoesDown(t *testing.T) {
	g := moduleGraph(t)
	if len(g) < 50 || len(g["internal/bringup"]) < 10 {
		t.Fatalf("go list found %d packages (bring-up imports %d): the listing is broken", len(g), len(g["internal/bringup"]))
	}
	// Positive control: the check catches an upward import and an unplaced package.
	bad := graph{"internal/tail": {"internal/cli"}, "internal/nowhere": {}, "internal/cli": {"internal/testutil"}}
	if v := violations(bad); len(v) < 3 {
		t.Fatalf("the check missed a planted violation: %q", v)
	}
	for _, v := range violations(g) {
		t.Error(v)
	}
}
