package hosttrust

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestGit(t *testing.T) {
	cases := []struct {
		name   string
		layout func(t *testing.T, tree string)
		dirs   []string
		want   []string
		err    string
	}{
		{"no repository", func(t *testing.T, tree string) {}, []string{"w/a"}, nil, ""},
		{"a repository at the root", func(t *testing.T, tree string) { mkdir(t, tree, ".git/hooks") }, nil, []string{".git"}, ""},
		{"a worktree's gitdir file pointing outside the tree", func(t *testing.T, tree string) { write(t, tree, ".git", "gitdir: /elsewhere\n") }, nil, []string{".git"}, ""},
		{"a worker's gitdir file pointing into the tree: both", func(t *testing.T, tree string) {
			mkdir(t, tree, "repos/wa.git/hooks")
			mkdir(t, tree, "wa")
			write(t, tree, "wa/.git", "gitdir: ../repos/wa.git\n")
		}, []string{"wa"}, []string{"wa/.git", "repos/wa.git"}, ""},
		{"a submodule's gitdir inside the root's .git: the root's covers it", func(t *testing.T, tree string) {
			mkdir(t, tree, ".git/modules/sub/hooks")
			mkdir(t, tree, "sub")
			write(t, tree, "sub/.git", "gitdir: ../.git/modules/sub\n")
		}, []string{"sub"}, []string{".git", "sub/.git"}, ""},
		{"a .git file naming no gitdir", func(t *testing.T, tree string) { write(t, tree, ".git", "hello\n") }, nil, nil, "names no gitdir"},
		{"the root's and a worker's, the worker named twice", func(t *testing.T, tree string) {
			mkdir(t, tree, ".git")
			mkdir(t, tree, "w/a/.git")
		}, []string{"w/a", "w/a/", "w/b"}, []string{".git", "w/a/.git"}, ""},
		{"a symlink is refused", func(t *testing.T, tree string) {
			mkdir(t, tree, "elsewhere")
			if err := os.Symlink("elsewhere", filepath.Join(tree, ".git")); err != nil {
				t.Fatal(err)
			}
		}, nil, nil, ".git is a symlink: git on this host follows it"},
		{"a FIFO is refused", func(t *testing.T, tree string) {
			mkdir(t, tree, "w")
			if err := mkfifo(filepath.Join(tree, "w", ".git")); err != nil {
				t.Skip(err)
			}
		}, []string{"w"}, nil, "neither a directory nor a gitdir file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tree := t.TempDir()
			tc.layout(t, tree)
			got, err := Git(tree, tc.dirs)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Git = %q, want %q", got, tc.want)
			}
		})
	}
}

func mkdir(t *testing.T, tree, rel string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(tree, rel), 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, tree, rel, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(tree, rel), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
