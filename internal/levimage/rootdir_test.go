package levimage

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lever-jail/lever/internal/levimage/levtest"
)

// rootTree is a small guest root with every kind of entry package files include, and some
// a workbench must not carry.
func rootTree(t *testing.T) (string, []string) {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"usr/bin", "usr/lib/git-core", "etc", "real", "sub"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(os.WriteFile(filepath.Join(root, "usr/bin/git"), []byte("git"), 0o755))
	must(os.Link(filepath.Join(root, "usr/bin/git"), filepath.Join(root, "usr/lib/git-core/git-add")))
	must(os.WriteFile(filepath.Join(root, "usr/bin/su"), []byte("su"), 0o755))
	must(os.Chmod(filepath.Join(root, "usr/bin/su"), 0o755|os.ModeSetuid))
	must(os.WriteFile(filepath.Join(root, "usr/bin/shared"), []byte("group-writable"), 0o664))
	must(os.Chmod(filepath.Join(root, "usr/bin/shared"), 0o664))
	must(os.WriteFile(filepath.Join(root, "usr/bin/ping"), []byte("ping"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/theirs"), []byte("another user's"), 0o755))
	must(os.Chown(filepath.Join(root, "usr/bin/theirs"), 1234, 0))
	must(os.MkdirAll(filepath.Join(root, "var/tmp"), 0o755))
	must(os.Chmod(filepath.Join(root, "var/tmp"), 0o777|os.ModeSticky))
	must(os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("guest's own passwd"), 0o644))
	must(os.Symlink("../usr/bin/git", filepath.Join(root, "etc/git-link")))
	must(os.Symlink("real", filepath.Join(root, "linkdir")))
	must(os.WriteFile(filepath.Join(root, "real/f"), []byte("under a link"), 0o644))
	must(os.WriteFile(filepath.Join(root, "--recursion"), []byte("a name"), 0o644))
	must(os.WriteFile(filepath.Join(root, "sub/secret"), []byte("not listed"), 0o600))
	must(syscall.Mkfifo(filepath.Join(root, "etc/fifo"), 0o644))
	paths := []string{"--recursion", "etc", "etc/fifo", "etc/git-link", "etc/gone", "etc/passwd", "linkdir", "linkdir/f", "sub",
		"usr", "usr/bin", "usr/bin/git", "usr/bin/ping", "usr/bin/shared", "usr/bin/su", "usr/bin/theirs", "usr/lib", "usr/lib/git-core", "usr/lib/git-core/git-add", "var", "var/tmp"}
	return root, paths
}

func ino(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// The tree holds exactly the listed paths: root's plain files shared with the guest by a
// hard link, everything a container could gain from copied without it, lev's layer on
// top, and the mount points a read-only root needs.
func TestMakeRootDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the tree is root's: run as root")
	}
	root, paths := rootTree(t)
	capped := unix.Lsetxattr(filepath.Join(root, "usr/bin/ping"), "security.capability",
		[]byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0) == nil // v2, cap_net_raw
	lev := levtest.Binary(t, "linux", runtime.GOARCH)
	dir := filepath.Join(t.TempDir(), "wb", "abc")
	os.MkdirAll(filepath.Dir(dir), 0o755)
	st, err := MakeRootDir(root, paths, levLayer(t, lev), dir, []string{"/lever", "/run/lever-bench"})
	if err != nil {
		t.Fatal(err)
	}
	// linked: root's plain files; the guest's hard links stay one inode
	for _, p := range []string{"usr/bin/git", "usr/lib/git-core/git-add"} {
		if ino(t, filepath.Join(dir, p)) != ino(t, filepath.Join(root, "usr/bin/git")) {
			t.Errorf("%s is not the guest's own file", p)
		}
	}
	// copied, with setuid dropped
	for p, want := range map[string]os.FileMode{"usr/bin/su": 0o755} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want || ino(t, filepath.Join(dir, p)) == ino(t, filepath.Join(root, p)) {
			t.Errorf("%s: mode %v (want %v), shared inode %v", p, fi.Mode(), want, ino(t, filepath.Join(dir, p)) == ino(t, filepath.Join(root, p)))
		}
	}
	if capped {
		if n, _ := unix.Lgetxattr(filepath.Join(dir, "usr/bin/ping"), "security.capability", nil); n > 0 || ino(t, filepath.Join(dir, "usr/bin/ping")) == ino(t, filepath.Join(root, "usr/bin/ping")) {
			t.Error("usr/bin/ping kept its file capability")
		}
	} else {
		t.Log("this file system takes no file capabilities: that row is not tested here")
	}
	if l, err := os.Readlink(filepath.Join(dir, "etc/git-link")); err != nil || l != "../usr/bin/git" {
		t.Errorf("etc/git-link: %q %v", l, err)
	}
	// left out: FIFOs, what is under a symlinked dir, the unlisted, the vanished, and what
	// a user other than root could have written (the key search does not read a tree's
	// root-only files)
	for _, p := range []string{"etc/fifo", "real", "sub/secret", "etc/gone", "usr/bin/shared", "usr/bin/theirs"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s is in the tree", p)
		}
	}
	if l, err := os.Readlink(filepath.Join(dir, "linkdir")); err != nil || l != "real" {
		t.Errorf("linkdir: %q %v", l, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "--recursion")); err != nil || string(b) != "a name" {
		t.Errorf("a name that reads as an option: %q %v", b, err)
	}
	// lev's layer on top (its passwd replaces the guest's), and the mount points
	if b, _ := os.ReadFile(filepath.Join(dir, "lev")); !bytes.Equal(b, must(os.ReadFile(lev))) {
		t.Error("/lev is not the helper's lev")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "etc/passwd")); !strings.HasPrefix(string(b), "root:x:0:0:") {
		t.Errorf("etc/passwd is %q, not lev's", b)
	}
	for _, p := range []string{"proc", "sys", "dev", "run", "tmp", "lever", "run/lever-bench", "etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/mtab"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			t.Errorf("mount point %s: %v", p, err)
		}
	}
	// lev's passwd replaced the link, never wrote through it into the guest's file
	if b, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); string(b) != "guest's own passwd" {
		t.Errorf("the guest's etc/passwd became %q", b)
	}
	// linked: git and its hard link, --recursion, the guest's passwd (replaced later);
	// copied: su, shared, ping (when it holds a capability)
	// only root writes a tree: a package's 1777 dir and lev's /tmp lose group/world write
	// and the sticky bit
	for _, p := range []string{"var/tmp", "tmp"} {
		if fi, err := os.Lstat(filepath.Join(dir, p)); err != nil || fi.Mode() != os.ModeDir|0o755 {
			t.Errorf("%s: %v %v, want drwxr-xr-x", p, fi.Mode(), err)
		}
	}
	want := RootDirStats{Entries: 16, Linked: 4, Copied: 2, Stripped: 2, Refused: 2}
	if !capped {
		want = RootDirStats{Entries: 16, Linked: 5, Copied: 1, Stripped: 1, Refused: 2}
	}
	if st.Fill <= 0 || st.Sync <= 0 {
		t.Errorf("stats %+v: fill and sync not timed", st)
	}
	if st.Fill, st.Sync = 0, 0; st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	// a second call finds it whole and makes nothing
	if st2, err := MakeRootDir(root, paths, levLayer(t, lev), dir, []string{"/lever", "/run/lever-bench"}); err != nil || st2.Entries != 0 {
		t.Errorf("second call: %+v %v", st2, err)
	}
}

// A bad plan (a name that climbs out) fails and leaves nothing: no tree, no build dir.
func TestMakeRootDirLeavesNothingOnFailure(t *testing.T) {
	root, _ := rootTree(t)
	lev := levtest.Binary(t, "linux", runtime.GOARCH)
	parent := t.TempDir()
	dir := filepath.Join(parent, "abc")
	if _, err := MakeRootDir(root, []string{"usr", "../../etc/shadow"}, levLayer(t, lev), dir, nil); err == nil || !strings.Contains(err.Error(), "not a relative path inside") {
		t.Fatalf("err %v", err)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
	// control: the same call with a good plan makes the tree
	if _, err := MakeRootDir(root, []string{"usr"}, levLayer(t, lev), dir, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "usr")); err != nil {
		t.Error(err)
	}
}

func levLayer(t *testing.T, lev string) *LevLayer {
	t.Helper()
	l, err := ReadLevLayer(lev)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// lev's tree holds lev's layer and the mount points, whole or not at all.
func TestMakeLevRootDir(t *testing.T) {
	lev := levtest.Binary(t, "linux", runtime.GOARCH)
	dir := filepath.Join(t.TempDir(), "lev-abc")
	if _, err := MakeLevRootDir(levLayer(t, lev), dir, []string{"/run/lever", "/var/lib/lev", "/lever/work/a"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "lev")); !bytes.Equal(b, must(os.ReadFile(lev))) {
		t.Error("/lev is not the helper's lev")
	}
	for _, p := range []string{"etc/passwd", "etc/group", "tmp", "run/lever", "var/lib/lev", "lever/work/a", "etc/resolv.conf", "proc"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "lev")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("/lev mode: %v %v", fi, err)
	}
	// a mount point that climbs out is refused and leaves nothing
	bad := filepath.Join(filepath.Dir(dir), "lev-bad")
	if _, err := MakeLevRootDir(levLayer(t, lev), bad, []string{"/../../etc"}); err == nil {
		t.Error("a mount point outside the tree was accepted")
	}
	if ents, _ := os.ReadDir(filepath.Dir(dir)); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}

// One helper call making lev's tree and the workbench's writes lev's 21 MiB once: the
// workbench's /lev is lev's tree's file, hard-linked (same inode, mode 0755, the helper's
// bytes). It is written instead when the link cannot be made (another file system),
// when the first /lev is no longer what writing it would make (a mode changed), and when
// lev's tree was there already (this call wrote no /lev to link).
func TestLevWrittenOnce(t *testing.T) {
	lev := levtest.Binary(t, "linux", runtime.GOARCH)
	want := must(os.ReadFile(lev))
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	levOK := func(t *testing.T, p string) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode() != 0o755 {
			t.Fatalf("%s: %v %v, want -rwxr-xr-x", p, fi, err)
		}
		if b, _ := os.ReadFile(p); !bytes.Equal(b, want) {
			t.Errorf("%s is not the helper's lev", p)
		}
	}
	nlink := func(p string) uint64 {
		var st syscall.Stat_t
		syscall.Lstat(p, &st)
		return uint64(st.Nlink)
	}
	bench := func(t *testing.T, l *LevLayer, dir string) string {
		t.Helper()
		if _, err := MakeRootDir(root, []string{"usr"}, l, dir, []string{"/lever"}); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "lev")
	}

	t.Run("linked", func(t *testing.T) {
		trees := t.TempDir()
		l := levLayer(t, lev)
		if _, err := MakeLevRootDir(l, filepath.Join(trees, "lev-a"), []string{"/run/lever"}); err != nil {
			t.Fatal(err)
		}
		first := filepath.Join(trees, "lev-a", "lev")
		second := bench(t, l, filepath.Join(trees, "bench-a"))
		third := bench(t, l, filepath.Join(trees, "bench-b"))
		levOK(t, first)
		levOK(t, second)
		if ino(t, second) != ino(t, first) || ino(t, third) != ino(t, first) || nlink(first) != 3 {
			t.Errorf("the workbenches' /lev are not lev's tree's (inodes %d %d %d, %d links)", ino(t, first), ino(t, second), ino(t, third), nlink(first))
		}
	})

	t.Run("another file system", func(t *testing.T) {
		trees := t.TempDir()
		other, err := os.MkdirTemp("/dev/shm", "levtree")
		if err != nil {
			t.Skipf("no /dev/shm: %v", err)
		}
		defer os.RemoveAll(other)
		var a, b syscall.Stat_t
		if syscall.Stat(other, &a) != nil || syscall.Stat(trees, &b) != nil || a.Dev == b.Dev {
			t.Skip("/dev/shm is on the temporary dir's file system here: no EXDEV to make")
		}
		l := levLayer(t, lev)
		if _, err := MakeLevRootDir(l, filepath.Join(other, "lev-a"), nil); err != nil {
			t.Fatal(err)
		}
		second := bench(t, l, filepath.Join(trees, "bench-a"))
		levOK(t, second)
		if ino(t, second) == ino(t, filepath.Join(other, "lev-a", "lev")) || nlink(second) != 1 {
			t.Error("the workbench's /lev is not its own file")
		}
	})

	t.Run("first lev changed", func(t *testing.T) {
		trees := t.TempDir()
		l := levLayer(t, lev)
		if _, err := MakeLevRootDir(l, filepath.Join(trees, "lev-a"), nil); err != nil {
			t.Fatal(err)
		}
		first := filepath.Join(trees, "lev-a", "lev")
		if err := os.Chmod(first, 0o755|os.ModeSetuid); err != nil {
			t.Fatal(err)
		}
		second := bench(t, l, filepath.Join(trees, "bench-a"))
		levOK(t, second) // not setuid
		if ino(t, second) == ino(t, first) {
			t.Error("linked to a /lev whose mode changed")
		}
	})

	t.Run("lev's tree was there", func(t *testing.T) {
		trees := t.TempDir()
		if made, err := MakeLevRootDir(levLayer(t, lev), filepath.Join(trees, "lev-a"), nil); err != nil || !made {
			t.Fatalf("first: made %v, %v", made, err)
		}
		l := levLayer(t, lev)
		// found whole: not made again, and said so (the helper answers it to the host)
		if made, err := MakeLevRootDir(l, filepath.Join(trees, "lev-a"), nil); err != nil || made {
			t.Fatalf("again: made %v, %v", made, err)
		}
		second := bench(t, l, filepath.Join(trees, "bench-a"))
		levOK(t, second)
		if ino(t, second) == ino(t, filepath.Join(trees, "lev-a", "lev")) {
			t.Error("linked to a /lev this layer did not write")
		}
	})
}

// TestLevLinkedFromInstalledCopy: the helper running lever's installed copy (root's, in a
// directory only root can enter) gives every tree a hard link to that copy, no write; a
// lev in an ordinary directory (the netns substrate's, which a rebuild may rewrite in
// place) or one whose mode is not /lev's is copied.
func TestLevLinkedFromInstalledCopy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the installed copy is root's")
	}
	lev := levtest.Binary(t, "linux", runtime.GOARCH)
	bin := must(os.ReadFile(lev))
	for _, tc := range []struct {
		name     string
		dirMode  os.FileMode
		fileMode os.FileMode
		linked   bool
	}{
		{"installed copy", 0o700, 0o755, true},
		{"ordinary directory", 0o755, 0o755, false},
		{"copy of another mode", 0o700, 0o700, false},
		{"root-only directory but not the installed name", 0o700, 0o755, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			d := filepath.Join(base, "bin")
			os.Mkdir(d, 0o700)
			name := "lev-0123456789abcdef0123456789abcdef"
			if strings.HasPrefix(tc.name, "root-only directory but") {
				name = "lev" // e.g. LEVER_LEV=/root/bin/lev on the netns substrate
			}
			self := filepath.Join(d, name)
			if err := os.WriteFile(self, bin, 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chmod(self, tc.fileMode)
			os.Chmod(d, tc.dirMode)
			l := levLayer(t, self)
			l.LinkFrom(self, d)
			tree := filepath.Join(base, "trees", "lev-a")
			os.Mkdir(filepath.Dir(tree), 0o755)
			if _, err := MakeLevRootDir(l, tree, nil); err != nil {
				t.Fatal(err)
			}
			got := filepath.Join(tree, "lev")
			if linked := ino(t, got) == ino(t, self); linked != tc.linked {
				t.Fatalf("linked %v, want %v", linked, tc.linked)
			}
			if fi, _ := os.Lstat(got); fi.Mode() != 0o755 {
				t.Errorf("/lev mode %v", fi.Mode())
			}
			if b, _ := os.ReadFile(got); !bytes.Equal(b, bin) {
				t.Error("/lev is not the helper's lev")
			}
			// a linked /lev never reads lev's 21 MiB; a written one reads them once
			if read := l.levData != nil; read == tc.linked {
				t.Errorf("lev's bytes read: %v, linked: %v", read, tc.linked)
			}
		})
	}
}

// TestInParallel: every index is done once, and a failure returns the error of the
// lowest index that failed (the error a one-worker walk in order would have met first).
func TestInParallel(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 1000, 4344} {
		var mu sync.Mutex
		seen := make([]int, n)
		if err := inParallel(n, func(i int) error {
			mu.Lock()
			seen[i]++
			mu.Unlock()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("n=%d: index %d done %d times", n, i, c)
			}
		}
	}
	for _, bad := range [][]int{{5}, {900, 130}, {3999, 70, 2000}} {
		err := inParallel(4344, func(i int) error {
			for _, b := range bad {
				if i == b {
					return fmt.Errorf("failed at %d", i)
				}
			}
			return nil
		})
		lowest := slices.Min(bad)
		if err == nil || err.Error() != fmt.Sprintf("failed at %d", lowest) {
			// a worker may stop before reaching a later failure, never skip an earlier
			// index in its own run; the lowest failing index's run always starts before
			// any run past it is refused, so its error is the one returned
			t.Errorf("failures at %v: %v, want the one at %d", bad, err, lowest)
		}
	}
}

// TestFillRootDirWorkers: the tree several workers fill (the rootTree's kinds of entry,
// among hundreds of plain files spread over directories, so several runs of 64 go to
// the workers) is the tree one worker fills: the same entries with the same kinds, modes
// and links to the guest's files, and the same counts.
func TestFillRootDirWorkers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the tree's files are root's")
	}
	root, paths := rootTree(t)
	for d := 0; d < 6; d++ {
		dir := fmt.Sprintf("usr/share/p%d", d)
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, "usr/share", dir)
		for f := 0; f < 60; f++ {
			p := fmt.Sprintf("%s/f%02d", dir, f)
			if err := os.WriteFile(filepath.Join(root, p), []byte(p), 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)

	fill := func(workers int) (RootDirStats, string) {
		t.Helper()
		was := maxWorkers
		maxWorkers = workers
		defer func() { maxWorkers = was }()
		tmp := filepath.Join(t.TempDir(), "tree")
		if err := os.Mkdir(tmp, 0o700); err != nil {
			t.Fatal(err)
		}
		st, err := fillRootDir(tmp, root, paths)
		if err != nil {
			t.Fatalf("%d workers: %v", workers, err)
		}
		return st, tmp
	}
	one, t1 := fill(1)
	many, t4 := fill(4)
	if one != many {
		t.Errorf("counts: one worker %+v, four %+v", one, many)
	}
	if one.Entries < 360 || one.Linked < 360 || one.Refused != 2 || one.Copied != 1 {
		t.Errorf("the control: one worker's counts %+v", one)
	}
	describe := func(tree string) map[string]string {
		got := map[string]string{}
		filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == tree {
				return err
			}
			fi, _ := os.Lstat(p)
			rel, _ := filepath.Rel(tree, p)
			desc := fi.Mode().String()
			if fi.Mode().IsRegular() {
				// linked to the guest's own file, or a copy
				if src, err := os.Lstat(filepath.Join(root, rel)); err == nil && os.SameFile(fi, src) {
					desc += " linked"
				}
			}
			got[rel] = desc
			return nil
		})
		return got
	}
	d1, d4 := describe(t1), describe(t4)
	if len(d1) < 370 {
		t.Fatalf("one worker's tree has %d entries", len(d1))
	}
	for p, want := range d1 {
		if d4[p] != want {
			t.Errorf("%s: four workers made %q, one worker %q", p, d4[p], want)
		}
	}
	for p := range d4 {
		if _, ok := d1[p]; !ok {
			t.Errorf("%s: only four workers made it", p)
		}
	}
}

// TestCopyPlainRefusesAReplacedFile: a copy is made only of the file the plan judged; one
// replaced since (another inode at the path) is refused, naming it.
func TestCopyPlainRefusesAReplacedFile(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "f")
	if err := os.WriteFile(src, []byte("judged"), 0o644); err != nil {
		t.Fatal(err)
	}
	judged, _ := os.Lstat(src)
	if _, err := copyPlain(src, filepath.Join(dir, "copy1"), judged); err != nil {
		t.Fatalf("the control: %v", err)
	}
	// moved aside, not removed: a removed file's inode number may be given to the next
	if err := os.Rename(src, filepath.Join(dir, "aside")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("replaced"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := copyPlain(src, filepath.Join(dir, "copy2"), judged); err == nil || !strings.Contains(err.Error(), "replaced while the tree was made") {
		t.Fatalf("a replaced file: %v", err)
	}
}

// TestFillRootDirSwappedFile: a file swapped between the fill's look and its link, in a
// directory a user other than root could write (a group-writable one here), does not
// enter the tree: the fill fails, naming it. Control: the same fill with nothing swapped
// links it.
func TestFillRootDirSwappedFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the tree's files are root's")
	}
	for _, swap := range []bool{false, true} {
		root := t.TempDir()
		mail := filepath.Join(root, "var/mail")
		if err := os.MkdirAll(mail, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(mail, 0o775) // root's, group-writable
		if err := os.WriteFile(filepath.Join(mail, "f"), []byte("judged"), 0o644); err != nil {
			t.Fatal(err)
		}
		afterLooks = func() {
			if !swap {
				return
			}
			os.Rename(filepath.Join(mail, "f"), filepath.Join(mail, "aside"))
			os.WriteFile(filepath.Join(mail, "f"), []byte("another user's"), 0o644)
			os.Chown(filepath.Join(mail, "f"), 1234, 1234)
		}
		tmp := filepath.Join(t.TempDir(), "tree")
		os.Mkdir(tmp, 0o700)
		st, err := fillRootDir(tmp, root, []string{"var", "var/mail", "var/mail/f"})
		afterLooks = nil
		if !swap {
			if err != nil || st.Linked != 1 {
				t.Fatalf("the control: %v, %+v", err, st)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "var/mail/f") {
			t.Fatalf("a swapped file: %v, %+v", err, st)
		}
		if b, _ := os.ReadFile(filepath.Join(tmp, "var/mail/f")); string(b) == "another user's" {
			t.Fatal("the swapped file is in the tree")
		}
	}
}

// TestBuildDirPlaced: buildDir says whether it put the tree in place. A tree already there
// is kept (not placed); so is one another build renamed into place while this one filled
// its own, which is then removed rather than left beside it.
func TestBuildDirPlaced(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "tree")
	fill := func(tmp string) error { return os.WriteFile(filepath.Join(tmp, "f"), []byte("mine"), 0o644) }
	if placed, err := buildDir(dir, fill); err != nil || !placed {
		t.Fatalf("first build: placed %v, %v", placed, err)
	}
	if placed, err := buildDir(dir, func(string) error { t.Error("filled a tree that was there"); return nil }); err != nil || placed {
		t.Fatalf("tree there: placed %v, %v", placed, err)
	}
	other := filepath.Join(parent, "raced")
	placed, err := buildDir(other, func(tmp string) error {
		// another build wins meanwhile
		if err := os.Mkdir(other, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(other, "f"), []byte("theirs"), 0o644); err != nil {
			return err
		}
		return fill(tmp)
	})
	if err != nil || placed {
		t.Fatalf("another build won: placed %v, %v", placed, err)
	}
	if b, _ := os.ReadFile(filepath.Join(other, "f")); string(b) != "theirs" {
		t.Errorf("the winner's tree holds %q", b)
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 2 {
		t.Errorf("left behind: %v", ents)
	}
	// something else at the name is refused, naming it and what it is, and left alone
	want := map[string]string{"a file": "not a directory (-rw-", "a symlink to a directory": "a symlink)", "another user's directory": "a directory of uid 65534)"}
	odd := map[string]func(p string) error{
		"a file":                   func(p string) error { return os.WriteFile(p, nil, 0o644) },
		"a symlink to a directory": func(p string) error { return os.Symlink(dir, p) },
	}
	if os.Geteuid() == 0 {
		odd["another user's directory"] = func(p string) error {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			return os.Chown(p, 65534, 65534)
		}
	}
	for name, mk := range odd {
		p := filepath.Join(parent, "odd")
		os.RemoveAll(p)
		if err := mk(p); err != nil {
			t.Fatal(err)
		}
		before := ino(t, p)
		placed, err := buildDir(p, fill)
		if placed || err == nil || !strings.Contains(err.Error(), p+" is there but is not a tree lever made ("+want[name]) {
			t.Errorf("%s at the name: placed %v, %v", name, placed, err)
		}
		if now := ino(t, p); now != before {
			t.Errorf("%s at the name was replaced (inode %d, was %d)", name, now, before)
		}
	}
}
