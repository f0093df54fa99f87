//go:build linux

package workfs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDescriptorHygiene: the descriptor checks open and close many descriptors per call.
// None may leak (the count in /proc/self/fd is back where it was after hundreds of reads,
// listings, writes and edits), and none may be closed twice: a descriptor number closed
// twice is closed the second time under whoever holds it by then (an MCP server's pipe,
// a connection). Pipes opened after the calls must survive garbage collection and its
// finalizers. The control is the same check on the pipes before the calls ran.
func TestDescriptorHygiene(t *testing.T) {
	root, wd, f := setup(t)
	f.Protect = Paths([]string{filepath.Join(root, "outside")}) // a DirProtector: every walk runs
	os.MkdirAll(filepath.Join(wd, "d"), 0o755)
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip(err)
		}
		return len(ents)
	}
	round := func() {
		for i := range 50 {
			a, err := f.ResolveRead("read_file", "in.txt")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := f.ReadFile("read_file", a, 100); err != nil {
				t.Fatal(err)
			}
			d, err := f.ResolveRead("list_dir", "d")
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := f.ReadDir("list_dir", d, 10); err != nil {
				t.Fatal(err)
			}
			w, err := f.ResolveWrite("write_file", filepath.Join("d", "e", "f.txt"))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.WriteFile("write_file", w, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			if err := f.EditFile("edit_file", w, func(b []byte) ([]byte, error) { return append(b, 'x'), nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	gc := func() {
		for range 5 {
			runtime.GC()
			runtime.Gosched()
		}
	}
	pipes := func() [][2]int {
		var ps [][2]int
		for range 64 {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		return ps
	}
	alive := func(ps [][2]int) int {
		dead := 0
		for _, p := range ps {
			for _, fd := range p {
				if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
					dead++
				}
			}
		}
		return dead
	}
	// Control: pipes made with no calls in between all survive.
	ctl := pipes()
	gc()
	if dead := alive(ctl); dead != 0 {
		t.Fatalf("control: %d pipe ends closed with no file tool call", dead)
	}
	for _, p := range ctl {
		unix.Close(p[0])
		unix.Close(p[1])
	}
	round() // warm up: the runtime's own descriptors settle
	gc()
	before := count()
	round()
	ps := pipes()
	gc()
	round()
	gc()
	if dead := alive(ps); dead != 0 {
		t.Fatalf("%d pipe ends were closed under their owner: a descriptor closed twice", dead)
	}
	for _, p := range ps {
		unix.Close(p[0])
		unix.Close(p[1])
	}
	if after := count(); after != before {
		t.Fatalf("descriptors: %d before, %d after 100 more rounds of calls", before, after)
	}
}

// TestFDRealFailsClosed: a descriptor whose file was unlinked since it was opened has no
// place to decide, so asking where it is fails (and every caller refuses) rather than
// answering with a path the kernel marks "(deleted)". Control: the same descriptor before
// the unlink answers its real path.
func TestFDRealFailsClosed(t *testing.T) {
	_, wd, _ := setup(t)
	p := filepath.Join(wd, "gone.txt")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	file, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if got, err := fdReal(file); err != nil || got != p {
		t.Fatalf("control: fdReal = %q, %v; want %s", got, err, p)
	}
	os.Remove(p)
	if got, err := fdReal(file); err == nil || !errors.Is(err, errFDUnknown) {
		t.Fatalf("fdReal of an unlinked file = %q, %v; want errFDUnknown", got, err)
	}
}
