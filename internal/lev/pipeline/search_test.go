package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// searchEnv is the fence env (a workdir with symlinks out, granted and ungranted read
// paths beside it) with glob and grep offered, and a secret planted where a search that
// escaped would find it.
func searchEnv(t *testing.T) *fenceEnv {
	e := newFenceEnv(t)
	e.stage.Tools = append(e.stage.Tools, "glob", "grep")
	mustWrite(t, filepath.Join(e.wd, "src", "main.go"), "package main\n// TODO: inside the workdir\nfunc main() {}\n")
	mustWrite(t, filepath.Join(e.wd, "src", "deep", "util.go"), "package deep\n// todo lower case\n")
	// A symlink deep inside the tree pointing out, at a file and at a directory.
	must(t, os.Symlink(filepath.Join(e.home, ".ssh", "id_rsa"), filepath.Join(e.wd, "src", "deep", "key")))
	must(t, os.Symlink(filepath.Join(e.home, ".ssh"), filepath.Join(e.wd, "src", "sshdir")))
	return e
}

// TestSearchToolsFenceAttacks: glob and grep cannot read outside the workdir by any
// spelling of the path or the pattern, granted read path or not. Each attack is refused
// at the step named, or walks without ever reaching the secret; the positive controls
// show the same calls pointed inside the workdir do find what is there.
func TestSearchToolsFenceAttacks(t *testing.T) {
	e := searchEnv(t)
	H := e.home
	cases := []struct {
		name, tool string
		args       map[string]any
		step, code string // the refusal expected; "" for a call that runs
		want       []string
		never      []string
	}{
		{"dot-dot root", "grep", map[string]any{"pattern": "SECRET", "path": "../../.ssh"}, StepFence, "outside-workdir", []string{"outside the workdir"}, nil},
		{"dot-dot inside root", "glob", map[string]any{"pattern": "*", "path": "src/../../../.ssh"}, StepFence, "outside-workdir", nil, nil},
		{"absolute root", "grep", map[string]any{"pattern": "SECRET", "path": H + "/.ssh"}, StepFence, "outside-workdir", nil, nil},
		{"absolute root /", "glob", map[string]any{"pattern": "**/id_rsa", "path": "/"}, StepFence, "outside-workdir", nil, nil},
		{"symlinked root", "grep", map[string]any{"pattern": "SECRET", "path": "link"}, StepFence, "outside-workdir", []string{"resolves to " + H + "/.ssh"}, nil},
		{"symlink deep in the tree as root", "grep", map[string]any{"pattern": "SECRET", "path": "src/sshdir"}, StepFence, "outside-workdir", nil, nil},
		{"granted read path, absolute", "grep", map[string]any{"pattern": "granted", "path": H + "/docs"}, StepFence, "outside-workdir",
			[]string{"grep searches only the workdir, whatever [read_paths] grants"}, nil},
		{"granted read path through a workdir symlink", "glob", map[string]any{"pattern": "*", "path": "docslink"}, StepFence, "outside-workdir",
			[]string{"glob searches only the workdir"}, nil},
		{"declared, not granted: no grant could let it out, so no stop for one", "grep", map[string]any{"pattern": "x", "path": H + "/design"}, StepFence, "outside-workdir",
			[]string{"grep searches only the workdir"}, nil},
		{"pattern with ../", "glob", map[string]any{"pattern": "../.ssh/*"}, StepOffer, "bad-arguments", []string{". or .. component"}, nil},
		{"pattern with a .. later", "glob", map[string]any{"pattern": "src/../../*"}, StepOffer, "bad-arguments", nil, nil},
		{"absolute pattern", "glob", map[string]any{"pattern": H + "/.ssh/*"}, StepOffer, "bad-arguments", []string{"relative"}, nil},
		{"grep file filter with ../", "grep", map[string]any{"pattern": "x", "glob": "../*"}, StepOffer, "bad-arguments", nil, nil},
		{"bad regexp", "grep", map[string]any{"pattern": "(unclosed"}, StepOffer, "bad-arguments", []string{"missing closing )"}, nil},
		{"symlinks in the tree are not followed (glob)", "glob", map[string]any{"pattern": "**"}, "", "",
			[]string{"src/deep/key@", "src/sshdir@", "link@", "src/main.go"}, []string{"id_rsa", "docs/readme.md"}},
		{"symlinks in the tree are not followed (grep)", "grep", map[string]any{"pattern": "SECRET|granted"}, "", "",
			[]string{"no matches"}, []string{"SECRET-KEY", "granted docs"}},
		// Positive controls: the same tools inside the workdir find what is there.
		{"positive: grep inside", "grep", map[string]any{"pattern": "TODO"}, "", "",
			[]string{"src/main.go:2:// TODO: inside the workdir"}, []string{"util.go"}},
		{"positive: grep case-insensitive under a root", "grep", map[string]any{"pattern": "todo", "path": "src", "case_insensitive": true}, "", "",
			[]string{"src/main.go:2:", "src/deep/util.go:2:// todo lower case"}, nil},
		{"positive: glob **", "glob", map[string]any{"pattern": "**/*.go"}, "", "",
			[]string{"src/main.go\n", "src/deep/util.go\n"}, nil},
		{"positive: glob under a root", "glob", map[string]any{"pattern": "*.go", "path": "src/deep"}, "", "",
			[]string{"src/deep/util.go"}, []string{"src/main.go"}},
		{"positive: grep file filter", "grep", map[string]any{"pattern": "package", "glob": "util.go"}, "", "",
			[]string{"src/deep/util.go:1:package deep"}, []string{"main.go"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, res := e.call(tc.tool, tc.args)
			if tc.step == "" {
				if res.IsError {
					t.Fatalf("refused: %s", res.Content)
				}
			} else if res.Refusal == nil || res.Refusal.Step != tc.step || res.Refusal.Code != tc.code {
				t.Fatalf("want a %s refusal (%s), got %+v: %s", tc.step, tc.code, res.Refusal, res.Content)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Content, w) {
					t.Errorf("result lacks %q:\n%s", w, res.Content)
				}
			}
			for _, n := range append(tc.never, "SECRET-KEY") {
				if strings.Contains(res.Content, n) {
					t.Errorf("result holds %q:\n%s", n, res.Content)
				}
			}
		})
	}
	// The granted path itself is readable by read_file: the refusals above are glob's and
	// grep's own confinement, not a missing grant.
	if _, res := e.call("read_file", map[string]any{"path": "docslink/readme.md"}); res.IsError || res.Content != "granted docs" {
		t.Fatalf("read_file through the grant: %s", res.Content)
	}
}

// TestSearchCaps: every search cap bites, and says so by name.
func TestSearchCaps(t *testing.T) {
	e := searchEnv(t)
	var many strings.Builder
	for i := 0; i < MaxGrepMatches+50; i++ {
		fmt.Fprintf(&many, "hit %d\n", i)
	}
	mustWrite(t, filepath.Join(e.wd, "many.txt"), many.String())
	big := strings.Repeat("x", MaxReadBytes) + "\nLATE\n"
	mustWrite(t, filepath.Join(e.wd, "big.txt"), big)
	mustWrite(t, filepath.Join(e.wd, "bin.dat"), "hit\x00binary")
	mustWrite(t, filepath.Join(e.wd, "long.txt"), "hit "+strings.Repeat("y", 2000))
	cases := []struct {
		name, tool string
		args       map[string]any
		want       []string
		never      []string
		lines      int // matching lines expected, -1 to skip
	}{
		{"match cap", "grep", map[string]any{"pattern": "^hit [0-9]", "path": "many.txt"}, []string{"stopped at 1000 matches, the grep match cap"}, nil, MaxGrepMatches},
		{"max_matches lowers it", "grep", map[string]any{"pattern": "^hit [0-9]", "path": "many.txt", "max_matches": 5}, []string{"stopped at 5 matches"}, nil, 5},
		{"max_matches cannot raise it", "grep", map[string]any{"pattern": "^hit [0-9]", "path": "many.txt", "max_matches": 5000}, []string{"stopped at 1000 matches"}, nil, MaxGrepMatches},
		{"per-file read cap", "grep", map[string]any{"pattern": "LATE", "path": "big.txt"}, []string{"no matches", "searched in their first 1 MiB only (MaxReadBytes)"}, nil, 0},
		{"binary skipped", "grep", map[string]any{"pattern": "binary", "path": "bin.dat"}, []string{"skipped 1 binary file"}, []string{"bin.dat:"}, 0},
		{"line cap", "grep", map[string]any{"pattern": "^hit y", "path": "long.txt"}, []string{"[line cut at 512 bytes]"}, []string{strings.Repeat("y", 600)}, 1},
		{"context lines", "grep", map[string]any{"pattern": "^hit 500$", "path": "many.txt", "context": 2}, []string{"many.txt-499-hit 498\n", "many.txt:501:hit 500\n", "many.txt-503-hit 502\n"}, []string{"hit 497", "hit 503"}, -1},
		{"context over its cap", "grep", map[string]any{"pattern": "x", "context": 11}, []string{"bad arguments"}, nil, -1},
		{"too many **", "glob", map[string]any{"pattern": "**/a/**/b/**/c/**/d/**"}, []string{"more than 4 ** components"}, nil, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, res := e.call(tc.tool, tc.args)
			for _, w := range tc.want {
				if !strings.Contains(res.Content, w) {
					t.Errorf("lacks %q:\n%.600s", w, res.Content)
				}
			}
			for _, n := range tc.never {
				if strings.Contains(res.Content, n) {
					t.Errorf("holds %q", n)
				}
			}
			if tc.lines >= 0 {
				n := 0
				for _, l := range strings.Split(res.Content, "\n") {
					if strings.Contains(l, ":") && !strings.HasPrefix(l, "[") {
						n++
					}
				}
				if n != tc.lines {
					t.Errorf("%d matching lines, want %d", n, tc.lines)
				}
			}
		})
	}
}

// TestWalkEntryCap: a tree over MaxWalkEntries is examined only that far, and the result
// says the walk cap stopped it.
func TestWalkEntryCap(t *testing.T) {
	e := searchEnv(t)
	dir := filepath.Join(e.wd, "flood")
	must(t, os.MkdirAll(dir, 0o755))
	for i := 0; i <= MaxWalkEntries; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%05d", i)))
		must(t, err)
		f.Close()
	}
	_, res := e.call("glob", map[string]any{"pattern": "zzz*", "path": "flood"})
	if !strings.Contains(res.Content, "stopped after examining 20000 entries, the walk cap (MaxWalkEntries)") {
		t.Fatalf("walk cap not reported: %.400s", res.Content)
	}
	_, res = e.call("glob", map[string]any{"pattern": "*", "path": "flood"})
	if !strings.Contains(res.Content, "stopped at 2000 paths, the glob result cap") {
		t.Fatalf("glob result cap not reported: %.400s", res.Content)
	}
}

// TestMatchGlob: the matcher's semantics: * ? [..] within a component, ** across.
func TestMatchGlob(t *testing.T) {
	for _, tc := range []struct {
		pat, path string
		want      bool
	}{
		{"*.go", "a.go", true},
		{"*.go", "d/a.go", false},
		{"**/*.go", "a.go", true},
		{"**/*.go", "d/e/a.go", true},
		{"d/**", "d/e/f", true},
		{"d/**", "x/e", false},
		{"d/**/f", "d/f", true},
		{"d/?.go", "d/ab.go", false},
		{"[ab].txt", "b.txt", true},
		{"**", "anything/at/all", true},
	} {
		if got := matchGlob(tc.pat, tc.path); got != tc.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", tc.pat, tc.path, got, tc.want)
		}
	}
}
