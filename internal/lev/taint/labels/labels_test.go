package labels

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// TestStore: each row stores some labels, changes the files as a shell command or a later
// run would, and reads one path back. Rows come in pairs where a label must survive and a
// control where nothing was stored for the data read.
func TestStore(t *testing.T) {
	type env struct {
		s          *Store
		wd, levDir string
	}
	write := func(t *testing.T, p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stamp := func(t *testing.T, e env, rel string, l taint.Level, replaced bool) {
		t.Helper()
		p := filepath.Join(e.wd, rel)
		if err := e.s.BeforeWrite(p, l); err != nil {
			t.Fatal(err)
		}
		write(t, p, "data")
		if err := e.s.AfterWrite(p, l, replaced); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e env)
		read  string // relative to wd, or "lev/..." for lev's state
		tree  int    // 0: File; 1: Tree names; 2: Tree contents
		want  taint.Level
	}{
		{name: "written private", setup: func(t *testing.T, e env) { stamp(t, e, "a.txt", taint.Private, true) }, read: "a.txt", want: taint.Private},
		{name: "control: unwritten file", setup: func(t *testing.T, e env) { write(t, filepath.Join(e.wd, "a.txt"), "x") }, read: "a.txt", want: taint.Public},
		{name: "renamed keeps it", setup: func(t *testing.T, e env) {
			stamp(t, e, "a.txt", taint.Private, true)
			os.Rename(filepath.Join(e.wd, "a.txt"), filepath.Join(e.wd, "b.txt"))
		}, read: "b.txt", want: taint.Private},
		{name: "hard link keeps it", setup: func(t *testing.T, e env) {
			stamp(t, e, "a.txt", taint.Private, true)
			os.Link(filepath.Join(e.wd, "a.txt"), filepath.Join(e.wd, "c.txt"))
		}, read: "c.txt", want: taint.Private},
		{name: "replaced by another inode keeps the path's label", setup: func(t *testing.T, e env) {
			stamp(t, e, "a.txt", taint.Private, true)
			os.Remove(filepath.Join(e.wd, "a.txt"))
			write(t, filepath.Join(e.wd, "a.txt"), "other")
		}, read: "a.txt", want: taint.Private},
		{name: "rewritten whole at internal lowers it", setup: func(t *testing.T, e env) {
			stamp(t, e, "a.txt", taint.Private, true)
			stamp(t, e, "a.txt", taint.Internal, true)
		}, read: "a.txt", want: taint.Public},
		{name: "moved away, then the path rewritten: the moved inode keeps it", setup: func(t *testing.T, e env) {
			stamp(t, e, "a.txt", taint.Private, true)
			os.Rename(filepath.Join(e.wd, "a.txt"), filepath.Join(e.wd, "b.txt"))
			stamp(t, e, "a.txt", taint.Internal, true)
		}, read: "b.txt", want: taint.Private},
		{name: "moved away, then the path rewritten: a whole-tree read still sees it", setup: func(t *testing.T, e env) {
			stamp(t, e, "a.txt", taint.Private, true)
			os.Rename(filepath.Join(e.wd, "a.txt"), filepath.Join(e.wd, "b.txt"))
			stamp(t, e, "a.txt", taint.Internal, true)
		}, read: ".", tree: 2, want: taint.Private},
		{name: "moved into a directory, the path rewritten: its listing finds it by identity", setup: func(t *testing.T, e env) {
			stamp(t, e, "a.txt", taint.Private, true)
			os.MkdirAll(filepath.Join(e.wd, "n"), 0o700)
			os.Rename(filepath.Join(e.wd, "a.txt"), filepath.Join(e.wd, "n", "secret-name"))
			stamp(t, e, "a.txt", taint.Internal, true)
		}, read: "n", tree: 1, want: taint.Private},
		{name: "control: a directory the moved file is not in", setup: func(t *testing.T, e env) {
			stamp(t, e, "a.txt", taint.Private, true)
			os.MkdirAll(filepath.Join(e.wd, "m"), 0o700)
			write(t, filepath.Join(e.wd, "m", "x"), "x")
			os.Rename(filepath.Join(e.wd, "a.txt"), filepath.Join(e.wd, "n-other"))
			stamp(t, e, "a.txt", taint.Internal, true)
		}, read: "m", tree: 1, want: taint.Public},
		{name: "edited at internal keeps it", setup: func(t *testing.T, e env) {
			stamp(t, e, "a.txt", taint.Private, true)
			stamp(t, e, "a.txt", taint.Internal, false)
		}, read: "a.txt", want: taint.Private},
		{name: "stamp before a write that never happened", setup: func(t *testing.T, e env) {
			e.s.BeforeWrite(filepath.Join(e.wd, "d.txt"), taint.Private)
		}, read: "d.txt", want: taint.Private},
		{name: "directory listing sees a labelled name", setup: func(t *testing.T, e env) { stamp(t, e, "n/secret-name", taint.Private, true) }, read: "n", tree: 1, want: taint.Private},
		{name: "control: listing a directory with no labels", setup: func(t *testing.T, e env) { write(t, filepath.Join(e.wd, "n/x"), "x") }, read: "n", tree: 1, want: taint.Public},
		{name: "run record at its run's label", setup: func(t *testing.T, e env) {
			e.s.RaiseRun("r-1", taint.Private)
			e.s.RaiseRun("r-1", taint.Internal) // never lowered
		}, read: "lev/runs/r-1/stages/0/messages.json", want: taint.Private},
		{name: "control: record of an internal run", setup: func(t *testing.T, e env) { e.s.RaiseRun("r-2", taint.Internal) }, read: "lev/runs/r-2/run.json", want: taint.Internal},
		{name: "unlabelled run reads private", read: "lev/runs/r-3/run.json", want: taint.Private},
		{name: "lev state outside runs reads private", read: "lev/token", want: taint.Private},
		{name: "a tree holding lev's runs", setup: func(t *testing.T, e env) {
			e.s.RaiseRun("r-1", taint.Private)
			write(t, filepath.Join(e.wd, "lev/runs/r-1/run.json"), "{}")
		}, read: ".", tree: 2, want: taint.Private},
		{name: "control: a tree holding lev's runs, all internal", setup: func(t *testing.T, e env) {
			e.s.RaiseRun("r-1", taint.Internal)
			write(t, filepath.Join(e.wd, "lev/runs/r-1/run.json"), "{}")
		}, read: ".", tree: 2, want: taint.Internal},
		{name: "a tree holding an unlabelled run", setup: func(t *testing.T, e env) {
			write(t, filepath.Join(e.wd, "lev/runs/r-9/run.json"), "{}")
		}, read: ".", tree: 2, want: taint.Private},
		{name: "unreadable label file fails closed", setup: func(t *testing.T, e env) {
			write(t, e.s.Path, "{not json")
		}, read: "a.txt", want: taint.Private},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := filepath.EvalSymlinks(t.TempDir())
			wd := filepath.Join(root, "wd")
			levDir := filepath.Join(wd, "lev") // lev's state inside the tree: the hard case
			os.MkdirAll(wd, 0o700)
			e := env{s: &Store{Path: filepath.Join(root, "labels.json"), Runs: filepath.Join(levDir, "runs"), State: []string{levDir}}, wd: wd, levDir: levDir}
			if tc.setup != nil {
				tc.setup(t, e)
			}
			p := filepath.Join(wd, tc.read)
			var got taint.Level
			switch tc.tree {
			case 0:
				got, _ = e.s.File(p)
			case 1:
				got, _ = e.s.Tree(p, false)
			case 2:
				got, _ = e.s.Tree(p, true)
			}
			if got != tc.want {
				t.Fatalf("label of %s = %s, want %s", tc.read, got, tc.want)
			}
		})
	}
}

// BenchmarkStore: the per-call cost the labels add, on a store holding 200 Private files
// and 200 runs (every call re-reads the file, so a label another run wrote is never missed).
func BenchmarkStore(b *testing.B) {
	root := b.TempDir()
	s := &Store{Path: filepath.Join(root, "labels.json"), Runs: filepath.Join(root, "runs")}
	for i := 0; i < 200; i++ {
		p := filepath.Join(root, "wd", "f", strconv.Itoa(i))
		os.MkdirAll(filepath.Dir(p), 0o700)
		os.WriteFile(p, []byte("x"), 0o600)
		s.AfterWrite(p, taint.Private, true)
		s.RaiseRun("r-"+strconv.Itoa(i), taint.Internal)
	}
	target := filepath.Join(root, "wd", "f", "100")
	b.Run("File", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.File(target)
		}
	})
	b.Run("RaiseRun unchanged", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.RaiseRun("r-1", taint.Internal)
		}
	})
	b.Run("AfterWrite", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.AfterWrite(target, taint.Private, true)
		}
	})
}

// TestMarkChanged: what a command created or changed under a tree since its snapshot is
// labelled (a shell command's copy, a rename), what it left alone is not (control); a tree
// past MaxWalk is marked whole (fail closed).
func TestMarkChanged(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	wd := filepath.Join(root, "wd")
	os.MkdirAll(wd, 0o700)
	os.WriteFile(filepath.Join(wd, "old.txt"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(wd, "a.txt"), []byte("x"), 0o600)
	s := &Store{Path: filepath.Join(root, "labels.json"), Runs: filepath.Join(root, "runs")}
	snap := s.Snapshot(wd)
	os.WriteFile(filepath.Join(wd, "copy.txt"), []byte("x"), 0o600)
	os.Rename(filepath.Join(wd, "a.txt"), filepath.Join(wd, "b.txt"))
	if _, err := s.MarkChanged(snap, taint.Private); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"copy.txt", "b.txt"} {
		if l, _ := s.File(filepath.Join(wd, f)); l != taint.Private {
			t.Fatalf("%s reads %s", f, l)
		}
	}
	if l, _ := s.File(filepath.Join(wd, "old.txt")); l != taint.Public {
		t.Fatalf("control: the untouched file reads %s", l)
	}
	// Internal is every file's default: nothing stored.
	if n, _ := s.MarkChanged(s.Snapshot(wd), taint.Internal); n != 0 {
		t.Fatalf("internal marked %d", n)
	}
	defer func(m int) { MaxWalk = m }(MaxWalk)
	MaxWalk = 2
	big := filepath.Join(root, "big")
	for i := 0; i < 5; i++ {
		os.MkdirAll(filepath.Join(big, strconv.Itoa(i)), 0o700)
	}
	os.WriteFile(filepath.Join(big, "0", "f"), []byte("x"), 0o600)
	if _, err := s.MarkChanged(s.Snapshot(big), taint.Private); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.File(filepath.Join(big, "0", "f")); l != taint.Private {
		t.Fatalf("a tree past the walk's cap is not marked whole: %s", l)
	}
}
