package docrefs

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/testutil"
)

// quoted is a code span in prose; link is a markdown link's target.
var (
	quoted = regexp.MustCompile("`([^`\\s]+)`")
	link   = regexp.MustCompile(`\]\(([^)\s#]+)(?:#[^)]*)?\)`)
)

// foreign names files the documents cite that belong to other projects or exist only at
// run time, so no file in this repository answers for them. Each is a reason, not a
// waiver: a repository path is never listed here.
var foreign = map[string]string{
	"boot.sh":                     "Lima's cloud-init boot script",
	"11-colorterm-environment.sh": "a Lima boot script",
	"20-rootless-base.sh":         "a Lima boot script",
	"00-modprobe.sh":              "a Lima boot script",
	"07-etc-environment.sh":       "a Lima boot script",
	"09-host-dns-setup.sh":        "a Lima boot script",
	"25-guestagent-base.sh":       "a Lima boot script",
	"35-setup-packages.sh":        "a Lima boot script",
	"pkg/driver/qemu/qemu.go":     "Lima's source",
	"ca/clients.json":             "a file in the instance's state dir",
	"broker/state.json":           "a file in the instance's state dir",
	"tools/list":                  "an MCP method, not the tools directory",
}

// sourceExt are the extensions whose citations name this repository's files: a Go file or
// a script is always ours unless listed in foreign. Data files (.json, .toml, .yaml, .txt)
// are mostly run-time state or a user's files, so they are checked only when rooted at a
// repository directory or under a testdata directory.
var sourceExt = map[string]bool{".go": true, ".sh": true, ".tmpl": true, ".js": true, ".restore": true}

// buildOutput are the top-level directories `make build` and `make dist` write (gitignored):
// what they hold depends on what was built in this checkout (CI builds before it tests), so
// a citation of them (`bin/limactl`) is not a repository file either way.
var buildOutput = map[string]bool{"bin": true, "dist": true}

// repoFiles lists every file and directory of the module, slash-separated and relative to
// root, skipping hidden and generated trees (but keeping .ci, which documents cite) and the build
// outputs.
func repoFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && p != root {
			name := d.Name()
			if (strings.HasPrefix(name, ".") && name != ".ci") || name == "node_modules" || (buildOutput[name] && path.Dir(rel) == ".") {
				return filepath.SkipDir
			}
		}
		if p != root {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking the module: %v", err)
	}
	sort.Strings(out)
	return out
}

// expand turns a citation's brace list (`host_{darwin,other}.go`) into its paths.
func expand(s string) []string {
	i := strings.Index(s, "{")
	j := strings.Index(s, "}")
	if i < 0 || j < i {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[i+1:j], ",") {
		out = append(out, expand(s[:i]+alt+s[j+1:])...)
	}
	return out
}

// placeholder turns a documented placeholder (`step_<id>.go`) into a glob.
var placeholder = regexp.MustCompile(`<[^>]*>`)

// citedPath says whether a code span names a file of this repository and, if so, the
// pattern it must match: rooted at the module (rooted) or as the tail of some path.
func citedPath(span string, top map[string]bool) (pattern string, rooted, ok bool) {
	s := strings.TrimSuffix(strings.TrimSuffix(span, "..."), "/")
	if s == "" || strings.ContainsAny(s, "$~:=\"'\\") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "-") {
		return "", false, false
	}
	if foreign[s] != "" {
		return "", false, false
	}
	s = placeholder.ReplaceAllString(s, "*")
	first, _, slashed := strings.Cut(s, "/")
	if slashed && top[first] && first != ".git" {
		return s, true, true
	}
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "*") {
		return "", false, false // a user's dotfile (`.lev/...`) or a bare pattern (`*.json`)
	}
	ext := path.Ext(s)
	switch {
	case sourceExt[ext]:
		return s, false, true
	case slashed && ext != "" && strings.Contains(s, "testdata/"):
		return s, false, true
	}
	return "", false, false
}

// TestCitedPathsExist holds every repository file the documents cite (a code span naming a
// path under a top-level directory, any Go file or script by name or tail, and a relative
// markdown link) to the tree: a renamed file leaves a map that points nowhere.
func TestCitedPathsExist(t *testing.T) {
	root := testutil.RepoRoot(t)
	files := repoFiles(t, root)
	top := map[string]bool{}
	for _, f := range files {
		if !strings.Contains(f, "/") {
			top[f] = true
		}
	}
	if !top["internal"] || !top["docs"] || !top[".ci"] {
		t.Fatalf("top-level entries %v lack internal, docs or .ci: the walk is broken", top)
	}
	// A rooted citation may also be a package's own directory named from inside it
	// (`scripts/observe.sh` in the bring-up section), so it falls back to a tail.
	var exists func(pattern string, rooted bool) bool
	exists = func(pattern string, rooted bool) bool {
		if rooted {
			for _, f := range files {
				if ok, _ := path.Match(pattern, f); ok {
					return true
				}
			}
			return exists(pattern, false)
		}
		for _, f := range files {
			// a tail: the whole path or its last len(pattern segments) segments
			segs := strings.Split(f, "/")
			n := strings.Count(pattern, "/") + 1
			if n > len(segs) {
				continue
			}
			if ok, _ := path.Match(pattern, strings.Join(segs[len(segs)-n:], "/")); ok {
				return true
			}
		}
		return false
	}
	existsRooted := func(p string) bool {
		for _, f := range files {
			if f == p {
				return true
			}
		}
		return false
	}
	// Positive controls: the matcher finds a real file both ways and refuses a made-up one.
	if !exists("internal/docrefs/paths_test.go", true) || !exists("docrefs/paths_*.go", false) || exists("internal/docrefs/nosuch.go", true) || existsRooted("docrefs/paths_test.go") {
		t.Fatal("the path matcher is broken")
	}
	var missing []string
	total := 0
	for _, doc := range documents(t, root) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatalf("reading %s: %v", doc, err)
		}
		rel, _ := filepath.Rel(root, doc)
		docDir := path.Dir(filepath.ToSlash(rel))
		for i, line := range strings.Split(string(data), "\n") {
			where := rel + ":" + itoa(i+1) + ": "
			for _, m := range quoted.FindAllStringSubmatch(line, -1) {
				for _, span := range expand(m[1]) {
					pattern, rooted, ok := citedPath(span, top)
					if !ok {
						continue
					}
					total++
					if !exists(pattern, rooted) {
						missing = append(missing, where+"`"+m[1]+"`")
						break
					}
				}
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				total++
				p := path.Clean(path.Join(docDir, target))
				if !existsRooted(p) {
					missing = append(missing, where+"link "+target)
				}
			}
		}
	}
	if total < 150 {
		t.Fatalf("found only %d cited paths in the documents: the patterns are broken", total)
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d cited paths do not exist:\n%s", len(missing), total, strings.Join(missing, "\n"))
	}
	t.Logf("%d cited paths checked", total)
}
