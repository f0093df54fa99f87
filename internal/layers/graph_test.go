package layers

import (
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/lever-jail/lever/internal/testutil"
)

const mod = "github.com/lever-jail/lever/"

// graph is the module's import graph as `go list` reports it for this build: each
// package (module-relative) to its direct imports from the module (module-relative), the
// non-test files only.
type graph map[string][]string

var (
	graphOnce sync.Once
	graphVal  graph
	graphErr  string
)

// moduleGraph lists the module's packages once per test binary.
func moduleGraph(t *testing.T) graph {
	t.Helper()
	graphOnce.Do(func() {
		cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
		cmd.Dir = testutil.RepoRoot(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			graphErr = "go list ./...: " + err.Error() + "\n" + string(out)
			return
		}
		g := graph{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || !strings.HasPrefix(f[0], mod) {
				continue
			}
			pkg := strings.TrimPrefix(f[0], mod)
			g[pkg] = []string{}
			for _, imp := range f[1:] {
				if strings.HasPrefix(imp, mod) {
					g[pkg] = append(g[pkg], strings.TrimPrefix(imp, mod))
				}
			}
			sort.Strings(g[pkg])
		}
		graphVal = g
	})
	if graphErr != "" {
		t.Fatal(graphErr)
	}
	return graphVal
}
