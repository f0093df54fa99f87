package pipeline

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestReadFileOffsetAttacks: read_file's offset is model-chosen. An offset near MaxInt64
// used to wrap offset+max negative and panic in make (killing lev serve); a large valid
// offset used to allocate the whole file prefix, bypassing MaxReadBytes.
func TestReadFileOffsetAttacks(t *testing.T) {
	e := newFenceEnv(t)
	mustWrite(t, filepath.Join(e.wd, "small.txt"), "0123456789")
	cases := []struct {
		name   string
		offset int64
		max    int64
		want   string // content, or error fragment when isErr
		isErr  bool
	}{
		{"MaxInt64 offset", math.MaxInt64, 0, "offset 9223372036854775807 is past the end of the file (10 bytes)", true},
		{"MaxInt64 offset with max_bytes", math.MaxInt64 - 3, 4, "is past the end of the file", true},
		{"offset just past the end", 11, 0, "offset 11 is past the end of the file (10 bytes)", true},
		{"offset at the end", 10, 0, "", false},
		{"offset in the middle", 4, 0, "456789", false},
		{"offset with max_bytes", 2, 3, "234\n[truncated at 3 bytes]", false},
		{"max_bytes reaching exactly the end", 7, 3, "789", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"path": "small.txt", "offset": tc.offset}
			if tc.max > 0 {
				args["max_bytes"] = tc.max
			}
			_, res := e.call("read_file", args)
			if res.IsError != tc.isErr {
				t.Fatalf("IsError = %v, want %v: %q", res.IsError, tc.isErr, res.Content)
			}
			if tc.isErr && !strings.Contains(res.Content, tc.want) || !tc.isErr && res.Content != tc.want {
				t.Fatalf("content %q, want %q", res.Content, tc.want)
			}
		})
	}
}

// TestReadFileOffsetAllocationBounded: reading max_bytes deep into a large (sparse) file
// allocates about max_bytes, not the prefix before the offset.
func TestReadFileOffsetAllocationBounded(t *testing.T) {
	e := newFenceEnv(t)
	p := filepath.Join(e.wd, "sparse.bin")
	f, err := os.Create(p)
	must(t, err)
	must(t, f.Truncate(1<<30)) // 1 GiB of holes: no disk used
	_, err = f.WriteAt([]byte("MARK"), 512<<20)
	must(t, err)
	must(t, f.Close())
	cases := []struct {
		name   string
		offset int64
		max    int64
		want   string
	}{
		{"deep offset, small max", 512 << 20, 4, "MARK"},
		{"deep offset, default max", 512 << 20, 0, "MARK"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"path": "sparse.bin", "offset": tc.offset}
			if tc.max > 0 {
				args["max_bytes"] = tc.max
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, res := e.call("read_file", args)
			runtime.ReadMemStats(&after)
			if res.IsError || !strings.HasPrefix(res.Content, tc.want) {
				t.Fatalf("read: %q", trim(res.Content))
			}
			// The result itself may hold up to MaxReadBytes (and its string copy); the
			// 512 MiB prefix must not have been allocated.
			limit := uint64(8*MaxReadBytes + 4<<20)
			if got := after.TotalAlloc - before.TotalAlloc; got > limit {
				t.Fatalf("allocated %d bytes reading at offset %d, want <= %d", got, tc.offset, limit)
			} else {
				t.Logf("allocated %d bytes", got)
			}
		})
	}
}

func trim(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// TestReadMissingThroughSymlinkNoOracle: workdir/link -> ~/.ssh. A file there that exists
// and one that does not get the same refusal, so the fence does not reveal what exists
// outside it.
func TestReadMissingThroughSymlinkNoOracle(t *testing.T) {
	e := newFenceEnv(t)
	H := e.home
	must(t, os.Symlink(filepath.Join(H, ".ssh", "gone"), filepath.Join(e.wd, "dangling")))
	cases := []struct {
		name, tool, path, real string
	}{
		{"existing file through a dir link", "read_file", "link/id_rsa", H + "/.ssh/id_rsa"},
		{"missing file through a dir link", "read_file", "link/id_ed25519", H + "/.ssh/id_ed25519"},
		{"missing nested path through a dir link", "read_file", "link/sub/key", H + "/.ssh/sub/key"},
		{"missing dir through a dir link, list_dir", "list_dir", "link/nodir", H + "/.ssh/nodir"},
		{"dangling link to a missing file outside", "read_file", "dangling", H + "/.ssh/gone"},
		{"through a dangling link", "read_file", "dangling/x", H + "/.ssh/gone/x"},
		{"a file used as a directory outside", "read_file", "link/id_rsa/x", H + "/.ssh/id_rsa"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, res := e.call(tc.tool, map[string]any{"path": tc.path})
			if res.Refusal == nil || res.Refusal.Step != StepFence || res.Refusal.Code != "outside-workdir" {
				t.Fatalf("want a fence refusal, got %+v", res)
			}
			want := tc.tool + ": refused: " + tc.path + " (resolves to " + tc.real
			if !strings.Contains(res.Content, want) || !strings.Contains(res.Content, "is outside the workdir and no declared [read_paths] entry covers it") {
				t.Fatalf("message %q, want it to contain %q", res.Content, want)
			}
			if strings.Contains(res.Content, "no such file") || strings.Contains(res.Content, "not a directory") {
				t.Fatalf("message reveals existence: %q", res.Content)
			}
		})
	}
	// Positive controls: a missing path in the workdir or a granted dir is reported as
	// missing, not refused.
	for _, p := range []string{"nope.txt", "docslink/nope.md", "../shared/nope.txt"} {
		_, res := e.call("read_file", map[string]any{"path": p})
		if res.Refusal != nil || !res.IsError || !strings.Contains(res.Content, "no such file") {
			t.Fatalf("%s: want a plain not-found error, got %+v", p, res)
		}
	}
}
