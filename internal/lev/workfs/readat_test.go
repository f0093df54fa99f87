package workfs

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadFileAt(t *testing.T) {
	_, wd, f := setup(t)
	os.WriteFile(filepath.Join(wd, "ten"), []byte("0123456789"), 0o644)
	a, err := f.ResolveRead("read_file", "ten")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		offset, max int64
		want        string
		trunc       bool
		err         string
	}{
		{"MaxInt64 offset", math.MaxInt64, 100, "", false, "offset 9223372036854775807 is past the end of the file (10 bytes)"},
		{"MaxInt64 offset, MaxInt64 max", math.MaxInt64, math.MaxInt64, "", false, "past the end"},
		{"negative offset", -1, 100, "", false, "offset -1 is negative"},
		{"offset at the end", 10, 100, "", false, ""},
		{"offset 0, MaxInt64 max", 0, math.MaxInt64, "0123456789", false, ""},
		{"offset 3, MaxInt64 max", 3, math.MaxInt64, "3456789", false, ""},
		{"truncated", 3, 4, "3456", true, ""},
		{"exactly to the end", 6, 4, "6789", false, ""},
		{"zero max", 3, 0, "", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, trunc, err := f.ReadFileAt("read_file", a, tc.offset, tc.max)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || string(data) != tc.want || trunc != tc.trunc {
				t.Fatalf("got %q trunc=%v err=%v, want %q trunc=%v", data, trunc, err, tc.want, tc.trunc)
			}
		})
	}
}

// TestReadFileAtAllocs: a read deep into a large sparse file allocates a buffer of about
// max bytes, whatever the offset.
func TestReadFileAtAllocs(t *testing.T) {
	_, wd, f := setup(t)
	p := filepath.Join(wd, "sparse")
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	fh.WriteAt([]byte("MARK"), 768<<20)
	fh.Close()
	a, err := f.ResolveRead("read_file", "sparse")
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	allocs := testing.AllocsPerRun(5, func() {
		data, _, err = f.ReadFileAt("read_file", a, 768<<20, 4)
	})
	if err != nil || string(data) != "MARK" {
		t.Fatalf("got %q %v", data, err)
	}
	// Opening, stat and the fd re-check allocate a little; the point is that no
	// allocation scales with the offset, checked by bytes below.
	t.Logf("%.0f allocs/read", allocs)
	bytesPerRead := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			f.ReadFileAt("read_file", a, 768<<20, 4)
		}
	}).AllocedBytesPerOp()
	if bytesPerRead > 64<<10 {
		t.Fatalf("%d bytes allocated per 4-byte read at offset 768 MiB", bytesPerRead)
	}
	t.Logf("%d bytes/read", bytesPerRead)
}

// TestResolveReadMissingNoOracle: through workdir/l -> outside, an existing and a missing
// target get the same refusal.
func TestResolveReadMissingNoOracle(t *testing.T) {
	root, wd, f := setup(t)
	os.Symlink(filepath.Join(root, "outside"), filepath.Join(wd, "l"))
	os.Symlink(filepath.Join(root, "outside", "gone"), filepath.Join(wd, "dangle"))
	os.Symlink("../../outside/rel-gone", filepath.Join(wd, "sub", "rel"))
	cases := []struct{ path, real string }{
		{"l/secret", root + "/outside/secret"},
		{"l/missing", root + "/outside/missing"},
		{"l/a/b/c", root + "/outside/a/b/c"},
		{"l/secret/x", root + "/outside/secret/x"},
		{"dangle", root + "/outside/gone"},
		{"dangle/deeper", root + "/outside/gone/deeper"},
		{"sub/rel", root + "/outside/rel-gone"},
		{"sub/rel/x", root + "/outside/rel-gone/x"},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			_, err := f.ResolveRead("read_file", tc.path)
			var r *Refusal
			if err == nil || !asRefusal(err, &r) || r.Code != CodeOutside || r.Real != tc.real {
				t.Fatalf("err = %v (%+v), want %s refusal on %s", err, r, CodeOutside, tc.real)
			}
			want := "read_file: refused: " + tc.path + " (resolves to " + tc.real + ") is outside the workdir"
			if !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("msg %q, want prefix %q", err, want)
			}
		})
	}
	// Positive control: missing inside the workdir is a plain not-found.
	if _, err := f.ResolveRead("read_file", "sub/nope"); err == nil || asRefusal(err, new(*Refusal)) || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("missing in workdir: %v", err)
	}
}
