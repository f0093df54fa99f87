package workfs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/lev/readpaths"
)

func setup(t *testing.T) (root, wd string, f *FS) {
	root, _ = filepath.EvalSymlinks(t.TempDir())
	wd = filepath.Join(root, "wd")
	os.MkdirAll(filepath.Join(wd, "sub"), 0o755)
	os.MkdirAll(filepath.Join(root, "outside"), 0o755)
	os.WriteFile(filepath.Join(root, "outside", "secret"), []byte("SECRET"), 0o600)
	os.WriteFile(filepath.Join(wd, "in.txt"), []byte("inside"), 0o644)
	fence, _ := readpaths.NewFence("a", nil, root, wd)
	f, err := New("a", wd, fence)
	if err != nil {
		t.Fatal(err)
	}
	return root, wd, f
}

// TestSwapAfterCheck simulates the race a fence must survive: the path is checked while
// harmless, then swapped for a symlink out of the workdir before the tool opens it.
func TestSwapAfterCheck(t *testing.T) {
	t.Run("read: file swapped for a symlink to a secret", func(t *testing.T) {
		root, wd, f := setup(t)
		a, err := f.ResolveRead("read_file", "in.txt")
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(wd, "in.txt"))
		os.Symlink(filepath.Join(root, "outside", "secret"), filepath.Join(wd, "in.txt"))
		// Real was resolved before the swap; point it at the link as a racing path would.
		a.Real = filepath.Join(wd, "in.txt")
		data, _, err := f.ReadFile("read_file", a, 100)
		if err == nil || strings.Contains(string(data), "SECRET") || !strings.Contains(err.Error(), "resolves to "+root+"/outside/secret") {
			t.Fatalf("read after swap: %q %v", data, err)
		}
	})
	t.Run("write: parent dir swapped for a symlink out", func(t *testing.T) {
		root, wd, f := setup(t)
		a, err := f.ResolveWrite("write_file", "sub/x.txt")
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(wd, "sub"))
		os.Symlink(filepath.Join(root, "outside"), filepath.Join(wd, "sub"))
		err = f.WriteFile("write_file", a, []byte("pwned"))
		var r *Refusal
		if err == nil || !asRefusal(err, &r) || r.Code != CodeWriteOutside {
			t.Fatalf("write after swap: %v", err)
		}
		if _, err := os.Stat(filepath.Join(root, "outside", "x.txt")); err == nil {
			t.Fatal("the write landed outside the workdir")
		}
	})
	t.Run("write: target swapped for a symlink to a secret", func(t *testing.T) {
		root, wd, f := setup(t)
		a, err := f.ResolveWrite("write_file", "in.txt")
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(wd, "in.txt"))
		os.Symlink(filepath.Join(root, "outside", "secret"), filepath.Join(wd, "in.txt"))
		if err := f.WriteFile("write_file", a, []byte("pwned")); err == nil {
			t.Fatal("wrote through a symlink")
		}
		if b, _ := os.ReadFile(filepath.Join(root, "outside", "secret")); string(b) != "SECRET" {
			t.Fatal("secret overwritten")
		}
	})
	t.Run("write: dangling symlink out is refused", func(t *testing.T) {
		root, wd, f := setup(t)
		os.Symlink(filepath.Join(root, "outside", "new"), filepath.Join(wd, "dangling"))
		_, err := f.ResolveWrite("write_file", "dangling")
		var r *Refusal
		if err == nil || !asRefusal(err, &r) || r.Code != CodeWriteOutside {
			t.Fatalf("dangling: %v", err)
		}
	})
	t.Run("read: a FIFO does not hang the call", func(t *testing.T) {
		_, wd, f := setup(t)
		if err := syscall.Mkfifo(filepath.Join(wd, "fifo"), 0o644); err != nil {
			t.Skip(err)
		}
		a, err := f.ResolveRead("read_file", "fifo")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.ReadFile("read_file", a, 100); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("fifo: %v", err)
		}
	})
}

func asRefusal(err error, r **Refusal) bool {
	x, ok := err.(*Refusal)
	*r = x
	return ok
}
