package probes

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// raceKey is the secret the attacks below hide; the search only ever gets its Patterns.
var raceKey = []byte("sk-test-race-0123456789abcdef0123456789abcdef")

// withBeforeOpen sets the hook a reader runs between the walk listing a path and opening
// it (the agent's window), for one test.
func withBeforeOpen(t *testing.T, f func(path string)) {
	t.Helper()
	beforeOpen = f
	t.Cleanup(func() { beforeOpen = nil })
}

// searchWithin runs Search and fails the test, instead of hanging it, when Search does
// not return in time. release, if set, is called on a timeout to free a stuck reader.
func searchWithin(t *testing.T, s Scan, release func()) Stats {
	t.Helper()
	done := make(chan Stats, 1)
	go func() { done <- Search(s) }()
	select {
	case st := <-done:
		return st
	case <-time.After(20 * time.Second):
		if release != nil {
			release()
		}
		t.Fatal("Search did not return within 20 s: a reader is stuck on what the path was swapped for")
		return Stats{}
	}
}

func foundAt(st Stats) []string {
	var out []string
	for _, h := range st.Found {
		out = append(out, h.Where)
	}
	return out
}

// TestSearchHardLinkFirstPathUnlinked: the key is in one inode with two paths. An agent
// unlinks (or renames away) the path the walk reached first, after the walk listed it and
// before a reader opens it. The other path is still read and the key found there: which
// paths name the same file is decided on the file a reader holds open, never on what the
// walk saw. Control: left alone, the file is read once and the hit reported under both
// paths.
func TestSearchHardLinkFirstPathUnlinked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attack func(first, away string) error // nil: left alone
		want   []string                       // base names found
		files  int
	}{
		{"left alone (control)", nil, []string{"a-first", "b-second"}, 1},
		{"first path unlinked", func(first, _ string) error { return os.Remove(first) }, []string{"b-second"}, 1},
		{"first path renamed out of the search", func(first, away string) error { return os.Rename(first, away) }, []string{"b-second"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			first, second := filepath.Join(dir, "a-first"), filepath.Join(dir, "b-second")
			away := filepath.Join(t.TempDir(), "moved")
			if err := os.WriteFile(first, append([]byte("k="), raceKey...), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(first, second); err != nil {
				t.Fatal(err)
			}
			attacked := false
			if tc.attack != nil {
				withBeforeOpen(t, func(p string) {
					if p == first {
						if err := tc.attack(first, away); err != nil {
							t.Errorf("attack: %v", err)
						}
						attacked = true
					}
				})
			}
			st := searchWithin(t, Scan{Patterns: Patterns(raceKey), Roots: []string{dir}}, nil)
			var want []string
			for _, w := range tc.want {
				want = append(want, filepath.Join(dir, w))
			}
			if got := foundAt(st); !slices.Equal(got, want) {
				t.Errorf("found at %v, want %v", got, want)
			}
			if st.Files != tc.files {
				t.Errorf("read %d files, want %d (the inode once)", st.Files, tc.files)
			}
			if tc.attack != nil {
				// The payload reached the reader: the path it had listed was gone.
				if !attacked || st.Changed != 1 {
					t.Errorf("attack ran %v, Changed %d: want the vanished path counted once", attacked, st.Changed)
				}
			} else if st.Changed != 0 {
				t.Errorf("Changed %d with nothing changed", st.Changed)
			}
		})
	}
}

// TestSearchPathSwappedBeforeOpen: after the walk lists a regular file, an agent replaces
// it with a FIFO (whose open would wait for a writer forever: the acceptance run hangs),
// a device (/dev/zero's numbers: an endless read), or a symlink to a file holding the key
// outside the search (which would steer the search). Search returns, reads none of them,
// and counts each in Changed. Controls: the file left alone is found; the symlink's
// target really holds the key (searched by name, it is found).
func TestSearchPathSwappedBeforeOpen(t *testing.T) {
	elsewhere := filepath.Join(t.TempDir(), "key-outside-the-search")
	if err := os.WriteFile(elsewhere, raceKey, 0o644); err != nil {
		t.Fatal(err)
	}
	if st := Search(Scan{Patterns: Patterns(raceKey), Files: []string{elsewhere}}); len(st.Found) != 1 {
		t.Fatalf("control: the symlink's target searched by name: found %v, want it", foundAt(st))
	}
	for _, tc := range []struct {
		name   string
		root   bool
		swap   func(p string) error // nil: left alone
		found  bool
		isType os.FileMode // what the path is after the search (the swap happened)
	}{
		{"left alone (control)", false, nil, true, 0},
		{"a FIFO", false, func(p string) error { return syscall.Mkfifo(p, 0o644) }, false, os.ModeNamedPipe},
		{"a symlink to the key", false, func(p string) error { return os.Symlink(elsewhere, p) }, false, os.ModeSymlink},
		{"a character device (/dev/zero's numbers)", true, func(p string) error {
			return syscall.Mknod(p, syscall.S_IFCHR|0o644, int(unix.Mkdev(1, 5)))
		}, false, os.ModeDevice | os.ModeCharDevice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("making a device node needs root")
			}
			dir := t.TempDir()
			victim := filepath.Join(dir, "victim")
			if err := os.WriteFile(victim, append([]byte("k="), raceKey...), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.swap != nil {
				withBeforeOpen(t, func(p string) {
					if p != victim {
						return
					}
					if err := os.Remove(p); err != nil {
						t.Errorf("swap: %v", err)
					}
					if err := tc.swap(p); err != nil {
						t.Errorf("swap: %v", err)
					}
				})
			}
			// A reader stuck opening the FIFO is freed by a writer, so that the failure
			// is reported and the test binary goes on.
			release := func() {
				if fd, err := unix.Open(victim, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
					unix.Close(fd)
				}
			}
			st := searchWithin(t, Scan{Patterns: Patterns(raceKey), Roots: []string{dir}}, release)
			if got := len(st.Found) > 0; got != tc.found {
				t.Errorf("found %v, want found %v", foundAt(st), tc.found)
			}
			if tc.swap == nil {
				if st.Changed != 0 || st.Files != 1 {
					t.Errorf("control: Changed %d, Files %d; want 0, 1", st.Changed, st.Files)
				}
				return
			}
			fi, err := os.Lstat(victim)
			if err != nil || fi.Mode().Type() != tc.isType {
				t.Fatalf("the swap did not happen: %v %v", fi, err)
			}
			if st.Changed != 1 || st.Files != 0 {
				t.Errorf("Changed %d, Files %d; want the swapped path counted (1) and nothing read", st.Changed, st.Files)
			}
		})
	}
}

// sparse makes a file of size bytes holding data at each offset, and skips the test where
// the filesystem does not leave the rest as holes.
func sparse(t *testing.T, path string, size int64, data map[int64][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, b := range data {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 >= size {
		t.Skipf("%s is not sparse on this filesystem (%d blocks for %d bytes)", path, st.Blocks, size)
	}
}

// TestSearchSparseFilesAndTheCap: the per-file cap counts data, not size. A 1 GiB sparse
// file holding the key in one small extent far into it is searched and the key found (it
// used to be skipped as over the cap, failing acceptance without a search); the holes are
// not read. A dense file with more data than the cap, and a sparse one whose data
// extents hold more, are still skipped unread and counted. A key across a 1 MiB read
// chunk inside a data extent is found. A filesystem that cannot tell where data lies
// (SEEK_DATA answering EINVAL, or a no-op llseek that does not move) reads a file whole,
// so the cap is on its size again.
func TestSearchSparseFilesAndTheCap(t *testing.T) {
	const gib = 1 << 30
	hole := func(n int) []byte { return make([]byte, n) }
	keyAt := func(pad int) []byte { return append(append(hole(pad), raceKey...), "tail"...) }
	einval := func(int, int64, int) (int64, error) { return 0, unix.EINVAL }
	noop := func(int, int64, int) (int64, error) { return 0, nil }
	for _, tc := range []struct {
		name    string
		max     int
		size    int64 // 0: dense, the data only
		data    map[int64][]byte
		lseek   func(int, int64, int) (int64, error)
		found   bool
		skipped int
		maxRead int64 // most bytes the search may read (0: no bound checked)
	}{
		{"1 GiB sparse, the key in an extent at 900 MiB", 1, gib, map[int64][]byte{900 << 20: keyAt(100)}, nil, true, 0, 1 << 20},
		{"1 GiB sparse, two extents far apart, the key in the second", 1, gib, map[int64][]byte{4096: []byte("first"), 1000 << 20: keyAt(5000)}, nil, true, 0, 1 << 20},
		{"sparse, a key across a 1 MiB chunk in a 3 MiB extent", 4, gib, map[int64][]byte{512 << 20: append(keyAt(chunk-7), hole(2*chunk)...)}, nil, true, 0, 4 << 20},
		{"sparse with more data than the cap", 1, gib, map[int64][]byte{100 << 20: keyAt(2 * chunk)}, nil, false, 1, 0},
		{"dense, more data than the cap", 1, 0, map[int64][]byte{0: keyAt(2 * chunk)}, nil, false, 1, 0},
		{"dense, within the cap (control)", 4, 0, map[int64][]byte{0: keyAt(2 * chunk)}, nil, true, 0, 0},
		{"no SEEK_DATA: a sparse file larger than the cap is skipped", 1, gib, map[int64][]byte{900 << 20: keyAt(100)}, einval, false, 1, 0},
		{"no SEEK_DATA: a sparse file within the cap is read whole", 2, 3 << 19, map[int64][]byte{1 << 20: keyAt(100)}, einval, true, 0, 3 << 19},
		{"a no-op llseek: read whole", 2, 3 << 19, map[int64][]byte{1 << 20: keyAt(100)}, noop, true, 0, 3 << 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "f")
			if tc.size > 0 {
				sparse(t, p, tc.size, tc.data)
			} else if err := os.WriteFile(p, tc.data[0], 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.lseek != nil {
				lseek = tc.lseek
				t.Cleanup(func() { lseek = unix.Seek })
			}
			st := searchWithin(t, Scan{Patterns: Patterns(raceKey), Roots: []string{dir}, MaxMiB: tc.max}, nil)
			if got := len(st.Found) > 0; got != tc.found || st.Skipped != tc.skipped {
				t.Errorf("found %v, skipped %d; want found %v, skipped %d", foundAt(st), st.Skipped, tc.found, tc.skipped)
			}
			if tc.skipped > 0 && (st.Files != 0 || st.Bytes != 0) {
				t.Errorf("a skipped file was read: %d files, %d bytes", st.Files, st.Bytes)
			}
			if tc.maxRead > 0 && st.Bytes > tc.maxRead {
				t.Errorf("read %d bytes, want at most %d (holes are not read)", st.Bytes, tc.maxRead)
			}
		})
	}
}
