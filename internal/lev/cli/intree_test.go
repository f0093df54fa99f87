package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestInTree: a file is in the tree when its path, or its path with symlinks resolved, is
// inside wd; a file that cannot be resolved counts as in it, so ReadTree refuses it.
func TestInTree(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wd := filepath.Join(root, "tree")
	sibling := wd + "x" // shares wd's prefix, is not inside it
	outside := filepath.Join(root, "elsewhere")
	for _, d := range []string{filepath.Join(wd, ".lev"), sibling, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(wd, ".lev", "a.toml"), filepath.Join(sibling, "a.toml"), filepath.Join(outside, "a.toml")} {
		if err := os.WriteFile(f, []byte("name = \"a\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) string {
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
		return name
	}
	inToOut := link(filepath.Join(outside, "a.toml"), filepath.Join(wd, "out.toml"))
	outToIn := link(filepath.Join(wd, ".lev", "a.toml"), filepath.Join(outside, "in.toml"))
	wdLink := link(wd, filepath.Join(root, "treelink"))
	dangling := link(filepath.Join(root, "gone"), filepath.Join(outside, "dangling.toml"))

	tests := []struct {
		name, file, wd string
		want           bool
	}{
		{"file in wd", filepath.Join(wd, ".lev", "a.toml"), wd, true},
		{"wd itself", wd, wd, true},
		{"unclean path into wd", filepath.Join(wd, ".lev") + "/../.lev/a.toml", wd, true},
		{"sibling sharing a prefix", filepath.Join(sibling, "a.toml"), wd, false},
		{"sibling directory itself", sibling, wd, false},
		{"file outside", filepath.Join(outside, "a.toml"), wd, false},
		{"unclean path out of wd", filepath.Join(wd, "..", "elsewhere", "a.toml"), wd, false},
		// Lexically inside wins: ReadTree then refuses the link that leaves the tree.
		{"symlink in wd pointing outside", inToOut, wd, true},
		{"symlink outside pointing into wd", outToIn, wd, true},
		{"file named through a symlinked wd", filepath.Join(wd, ".lev", "a.toml"), wdLink, true},
		{"file outside, symlinked wd", filepath.Join(outside, "a.toml"), wdLink, false},
		{"missing file", filepath.Join(outside, "missing.toml"), wd, true},
		{"dangling symlink", dangling, wd, true},
		{"missing wd", filepath.Join(outside, "a.toml"), filepath.Join(root, "nowd"), false},
	}
	for _, tt := range tests {
		if got := inTree(tt.file, tt.wd); got != tt.want {
			t.Errorf("%s: inTree(%q, %q) = %v, want %v", tt.name, tt.file, tt.wd, got, tt.want)
		}
	}
}

// TestInTreeRelative: a relative file is taken from the current directory, as lev
// validate is given it.
func TestInTreeRelative(t *testing.T) {
	wd, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wd, "a.toml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(wd, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(wd)
	if !inTree("a.toml", wd) {
		t.Error(`inTree("a.toml", wd) = false with wd the current directory, want true`)
	}
	if inTree("a.toml", filepath.Join(wd, "sub")) {
		t.Error(`inTree("a.toml", wd/sub) = true, want false`)
	}
}
