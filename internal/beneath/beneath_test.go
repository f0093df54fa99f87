package beneath

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// layout is a directory an agent prepared: links out of it, a FIFO, a huge sparse file.
func layout(t *testing.T) (dir, outside string) {
	t.Helper()
	dir, outside = t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("outside"), 0o600))
	must(os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "sub", "ok"), []byte("gitdir: x\n"), 0o644))
	must(os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs-link")))
	must(os.Symlink("sub/ok", filepath.Join(dir, "rel-link")))
	must(os.Symlink(outside, filepath.Join(dir, "dir-link")))
	must(os.Symlink("sub", filepath.Join(dir, "in-tree-dir-link")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600))
	f, err := os.Create(filepath.Join(dir, "huge"))
	must(err)
	must(f.Truncate(10 << 30)) // 10 GiB, sparse: no disk, all of it readable zeros
	must(f.Close())
	must(os.WriteFile(filepath.Join(dir, "big"), make([]byte, 4097), 0o644))
	return dir, outside
}

// TestReadFile: every planted thing is refused with an error naming the file (and the
// cap, for size), in both resolvers; a regular file beneath is read (the control).
func TestReadFile(t *testing.T) {
	for _, walk := range []bool{false, true} {
		forceWalk = walk
		t.Cleanup(func() { forceWalk = false })
		dir, _ := layout(t)
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		cases := []struct{ rel, want string }{
			{"sub/ok", ""},
			{"abs-link", "a symlink is on the path"},
			{"rel-link", "a symlink is on the path"},
			{"dir-link/secret", "a symlink is on the path"},
			{"in-tree-dir-link/ok", "a symlink is on the path"},
			{"../" + filepath.Base(dir) + "/sub/ok", "leads out of the directory"},
			{"/etc/passwd", "not a path relative"},
			{"fifo", "is not a regular file (a FIFO)"},
			{"sub", "is not a regular file (a directory)"},
			{"huge", "is 10737418240 bytes, more than the 4096 lever reads from it"},
			{"big", "is 4097 bytes, more than the 4096"},
		}
		for _, tc := range cases {
			b, err := d.ReadFile(tc.rel, 4096)
			if tc.want == "" {
				if err != nil || string(b) != "gitdir: x\n" {
					t.Errorf("walk=%v %s: %q %v", walk, tc.rel, b, err)
				}
				continue
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("walk=%v %s: err %v, want %q", walk, tc.rel, err, tc.want)
				continue
			}
			if !strings.HasPrefix(tc.rel, "/") && !strings.HasPrefix(tc.rel, "..") && !strings.Contains(err.Error(), filepath.Join(dir, tc.rel)) {
				t.Errorf("walk=%v %s: the error does not name the file: %v", walk, tc.rel, err)
			}
		}
	}
}

// TestReadHugeAllocatesNothing: refusing a 10 GiB sparse file and a FIFO allocates a
// bounded few KiB, not the file (the control: reading a 1 MiB file does allocate it).
func TestReadHugeAllocatesNothing(t *testing.T) {
	dir, _ := layout(t)
	os.WriteFile(filepath.Join(dir, "mib"), make([]byte, 1<<20), 0o644)
	alloc := func(p string) uint64 {
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		ReadFile(p, 64<<20)
		runtime.ReadMemStats(&b)
		return b.TotalAlloc - a.TotalAlloc
	}
	// The cap is 64 MiB here, far more than the bound: a read of the whole huge file
	// would allocate up to the cap; a refusal allocates next to nothing.
	if n := alloc(filepath.Join(dir, "huge")); n > 64<<10 {
		t.Errorf("refusing a 10 GiB file allocated %d bytes", n)
	}
	if n := alloc(filepath.Join(dir, "fifo")); n > 64<<10 {
		t.Errorf("refusing a FIFO allocated %d bytes", n)
	}
	if n := alloc(filepath.Join(dir, "mib")); n < 1<<20 {
		t.Errorf("control: reading 1 MiB allocated only %d bytes", n)
	}
	if _, err := ReadFile(filepath.Join(dir, "huge"), 64<<20); !errors.As(err, new(*TooBig)) {
		t.Errorf("huge: %v", err)
	}
}

// TestWrite: directories and files are made beneath, never through a planted link; an
// existing file is never opened; the control makes both in a clean place.
func TestWrite(t *testing.T) {
	for _, walk := range []bool{false, true} {
		forceWalk = walk
		t.Cleanup(func() { forceWalk = false })
		dir, outside := layout(t)
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if _, err := d.MkdirAll("dir-link/agents", 0o755); !errors.Is(err, ErrSymlink) {
			t.Errorf("walk=%v: mkdir through a link: %v", walk, err)
		}
		if err := d.Create("dir-link/new", []byte("x"), 0o644); !errors.Is(err, ErrSymlink) {
			t.Errorf("walk=%v: create through a link: %v", walk, err)
		}
		if err := d.Create("abs-link", []byte("x"), 0o644); !errors.Is(err, os.ErrExist) {
			t.Errorf("walk=%v: create over a link: %v", walk, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Errorf("walk=%v: something was made outside: %v", walk, ents)
		}
		if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "outside" {
			t.Errorf("walk=%v: the file outside was written: %q", walk, b)
		}
		made, err := d.MkdirAll("a/b/c", 0o755)
		if err != nil || strings.Join(made, ",") != "a,a/b,a/b/c" {
			t.Fatalf("walk=%v: control mkdir: %v %v", walk, made, err)
		}
		if err := d.Create("a/b/c/f", []byte("x"), 0o644); err != nil {
			t.Fatalf("walk=%v: control create: %v", walk, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "a/b/c/f")); err != nil || string(b) != "x" {
			t.Fatalf("walk=%v: control file: %q %v", walk, b, err)
		}
		for _, p := range []string{"a/b/c/f", "a/b/c", "a/b", "a"} {
			if err := d.Remove(p); err != nil {
				t.Fatalf("walk=%v: remove %s: %v", walk, p, err)
			}
		}
		if err := d.Remove("dir-link/secret"); !errors.Is(err, ErrSymlink) {
			t.Errorf("walk=%v: remove through a link: %v", walk, err)
		}
	}
}
