package keyfile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const key = "sk-test-0123456789abcdef\n"

// layout makes a tree and a home beside it, each with a key file of mode 0600.
func layout(t *testing.T) (tree, home string) {
	t.Helper()
	root := t.TempDir()
	tree, home = filepath.Join(root, "tree"), filepath.Join(root, "home")
	for _, d := range []string{filepath.Join(tree, "sub"), home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{filepath.Join(tree, "key"), filepath.Join(tree, "sub", "key"), filepath.Join(home, "key")} {
		if err := os.WriteFile(p, []byte(key), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return tree, home
}

// TestReadRefusesKeyInOrThroughTheTree: every spelling of a path into the tree is
// refused; the same file outside the tree is read (the positive control).
func TestReadRefusesKeyInOrThroughTheTree(t *testing.T) {
	tree, home := layout(t)
	root := filepath.Dir(tree)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(tree, "key"), filepath.Join(home, "link-in")))
	must(os.Symlink(filepath.Join(home, "key"), filepath.Join(root, "link-out")))
	must(os.Symlink(tree, filepath.Join(root, "tree-link")))
	cases := []struct {
		name, path, tree string
		inTree           bool
	}{
		{"outside", filepath.Join(home, "key"), tree, false},
		{"outside through a symlink", filepath.Join(root, "link-out"), tree, false},
		{"no tree", filepath.Join(tree, "key"), "", false},
		{"in the tree", filepath.Join(tree, "key"), tree, true},
		{"deeper in the tree", filepath.Join(tree, "sub", "key"), tree, true},
		{"symlink into the tree", filepath.Join(home, "link-in"), tree, true},
		{"dot-dot into the tree", filepath.Join(home, "..", "tree", "sub", "..", "key"), tree, true},
		{"tree named through a symlink", filepath.Join(tree, "key"), filepath.Join(root, "tree-link"), true},
		{"key named through the tree's symlink", filepath.Join(root, "tree-link", "key"), tree, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, err := Read(c.path, c.tree)
			if c.inTree {
				if !errors.Is(err, ErrInTree) || !strings.Contains(err.Error(), c.path) {
					t.Fatalf("Read(%s) = %q, %v; want the in-tree refusal naming the path", c.path, data, err)
				}
				if data != nil {
					t.Fatalf("refused, yet returned %q", data)
				}
				if err := Check(c.path, c.tree); !errors.Is(err, ErrInTree) {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err != nil || string(data) != key {
				t.Fatalf("Read(%s) = %q, %v; want the key", c.path, data, err)
			}
		})
	}
}

// TestReadRefusesKeyThroughABindMount: a bind mount of the tree, or of a directory in it,
// is another spelling of the tree; Linux only, as root.
func TestReadRefusesKeyThroughABindMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	tree, home := layout(t)
	for _, c := range []struct{ name, src string }{{"the tree", tree}, {"a directory in the tree", filepath.Join(tree, "sub")}} {
		t.Run(c.name, func(t *testing.T) {
			mnt := filepath.Join(home, "mnt-"+filepath.Base(c.src))
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("mount", "--bind", c.src, mnt).CombinedOutput(); err != nil {
				t.Skipf("mount --bind: %v %s", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", mnt).Run() })
			p := filepath.Join(mnt, "key")
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("positive control: the key is not reachable through the mount: %v", err)
			}
			if _, err := Read(p, tree); !errors.Is(err, ErrInTree) {
				t.Fatalf("Read(%s) through a bind of %s: %v; want the in-tree refusal", p, c.src, err)
			}
		})
	}
	// The control: a bind mount of a directory outside the tree is fine.
	out := filepath.Join(filepath.Dir(tree), "outbind")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command("mount", "--bind", home, out).CombinedOutput(); err != nil {
		t.Skipf("mount --bind: %v %s", err, o)
	}
	t.Cleanup(func() { exec.Command("umount", out).Run() })
	if data, err := Read(filepath.Join(out, "key"), tree); err != nil || string(data) != key {
		t.Fatalf("a key through a bind of a directory outside the tree: %q, %v", data, err)
	}
}

// TestReadRefusesAFileNotTheUsersOwn: modes, owners, links and kinds lever refuses, each
// against a control that differs only there.
func TestReadRefusesAFileNotTheUsersOwn(t *testing.T) {
	_, home := layout(t)
	good := filepath.Join(home, "key")
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(home, name)
		if err := os.WriteFile(p, []byte(key), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	linked := mk("linked", 0o600)
	if err := os.Link(linked, filepath.Join(home, "linked2")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(home, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := mk("big", 0o600)
	if err := os.WriteFile(big, []byte(strings.Repeat("k", Max+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	atMax := mk("atmax", 0o600)
	if err := os.WriteFile(atMax, []byte(strings.Repeat("k", Max)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, path, want string }{
		{"the user's own 0600 file", good, ""},
		{"a file of exactly the cap", atMax, ""},
		{"group-readable", mk("g", 0o640), "has mode 0640"},
		{"world-readable", mk("o", 0o604), "has mode 0604"},
		{"two hard links", linked, "has 2 hard links"},
		{"a FIFO (would block a plain open)", fifo, "not a regular file"},
		{"a directory", home, "not a regular file"},
		{"over the cap", big, "larger than 64 KiB"},
		{"missing", filepath.Join(home, "nope"), "no such file"},
	}
	if os.Geteuid() == 0 {
		other := mk("other", 0o600)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct{ name, path, want string }{"owned by another user", other, "owned by uid 65534, not by you (uid 0)"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, err := Read(c.path, "")
			if c.want == "" {
				if err != nil || len(data) == 0 {
					t.Fatalf("Read(%s) = %d bytes, %v; want it read", c.path, len(data), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Fatalf("Read(%s) = %v; want an error naming the path and %q", c.path, err, c.want)
			}
		})
	}
}
