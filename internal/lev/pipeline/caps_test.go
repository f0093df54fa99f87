package pipeline

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// TestWriteCaps attacks the write cap through Handle: write_file with content over it,
// edit_file's replace_all growing a file past it (in one call, and one call at a time),
// and an edit of a file already over it (made by a shell). Each is refused with a message
// naming the cap, and the file is what it was. The controls, the same calls under the
// cap, succeed: the payload reached the tool.
func TestWriteCaps(t *testing.T) {
	e := newFenceEnv(t)
	f := filepath.Join(e.wd, "grow.txt")
	big := filepath.Join(e.wd, "big.txt")
	mustWrite(t, big, strings.Repeat("x", MaxWriteBytes+1))
	reset := func(n int) {
		must(t, os.WriteFile(f, []byte(strings.Repeat("a", n)), 0o644))
	}
	cases := []struct {
		name    string
		setup   func()
		tool    string
		args    map[string]any
		refused string // in the message; "" = succeeds
		size    int64  // grow.txt's size after the call (-1: do not check)
	}{
		{"write over the cap", func() { reset(10) }, "write_file",
			map[string]any{"path": "grow.txt", "content": strings.Repeat("w", MaxWriteBytes+1)},
			"over the 16 MiB write cap (MaxWriteBytes); nothing was written", 10},
		{"write a new file over the cap", func() {}, "write_file",
			map[string]any{"path": "new-big.txt", "content": strings.Repeat("w", 20<<20)},
			"bad arguments: content is 20 MiB, over the 16 MiB write cap (MaxWriteBytes); nothing was written", -1},
		{"write at the cap (control)", func() { reset(10) }, "write_file",
			map[string]any{"path": "grow.txt", "content": strings.Repeat("w", MaxWriteBytes)}, "", MaxWriteBytes},
		{"replace_all past the cap in one call", func() { reset(1 << 20) }, "edit_file",
			map[string]any{"path": "grow.txt", "old_string": "a", "new_string": strings.Repeat("b", 70), "replace_all": true},
			"the result would be 70 MiB, over the 16 MiB write cap", 1 << 20},
		{"replace_all under the cap (control)", func() { reset(1 << 20) }, "edit_file",
			map[string]any{"path": "grow.txt", "old_string": "a", "new_string": strings.Repeat("b", 8), "replace_all": true}, "", 8 << 20},
		{"replace_all doubling: second call passes the cap", func() { reset(6 << 20) }, "edit_file",
			map[string]any{"path": "grow.txt", "old_string": "a", "new_string": "aa", "replace_all": true}, "", 12 << 20},
		{"replace_all doubling again", func() {}, "edit_file",
			map[string]any{"path": "grow.txt", "old_string": "a", "new_string": "aa", "replace_all": true},
			"the result would be 24 MiB, over the 16 MiB write cap", 12 << 20},
		{"edit a file already over the cap", func() {}, "edit_file",
			map[string]any{"path": "big.txt", "old_string": "x", "new_string": "y"},
			"big.txt: the file is 16.0 MiB (16777217 bytes), over the 16 MiB write cap", -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			_, res := e.call(tc.tool, tc.args)
			if tc.refused == "" {
				if res.IsError {
					t.Fatalf("control refused: %s", res.Content)
				}
			} else if !res.IsError || !strings.Contains(res.Content, tc.refused) {
				t.Fatalf("want refusal %q, got %s", tc.refused, cut(res.Content))
			} else if tc.tool == "edit_file" && (res.Refusal == nil || res.Refusal.Step != StepExecute || res.Refusal.Code != workfs.CodeWriteCap) {
				t.Fatalf("want an execute/write-cap refusal, got %+v", res.Refusal)
			}
			if tc.size >= 0 {
				fi, err := os.Stat(f)
				if err != nil || fi.Size() != tc.size {
					t.Fatalf("grow.txt: %v, size %d, want %d", err, fi.Size(), tc.size)
				}
			}
			t.Logf("%s", cut(res.Content))
		})
	}
	if _, err := os.Stat(filepath.Join(e.wd, "new-big.txt")); err == nil {
		t.Fatal("a refused write created its file")
	}
	if fi, _ := os.Stat(big); fi.Size() != MaxWriteBytes+1 {
		t.Fatal("a refused edit changed big.txt")
	}
}

func cut(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// TestResultCaps: every result is bounded, and a cap that bites names itself. list_dir
// over a directory of more entries than its cap, and of long names past the result cap;
// shell output past its per-stream cap; a path argument past the path cap (which would
// otherwise come back in the refusal); submit_output past the output cap. The controls
// (a small directory, a short command, a normal path and output) come back whole.
func TestResultCaps(t *testing.T) {
	e := newFenceEnv(t)
	e.stage.Tools = append(e.stage.Tools, "shell", "submit_output")
	e.p.Perms = &Permissions{User: map[string]blueprint.Permission{"shell": blueprint.Allow}}
	many := filepath.Join(e.wd, "many")
	long := filepath.Join(e.wd, "long")
	must(t, os.MkdirAll(many, 0o755))
	must(t, os.MkdirAll(long, 0o755))
	for i := range MaxListEntries + 50 {
		must(t, os.WriteFile(filepath.Join(many, fmt.Sprint(i)), nil, 0o644))
	}
	for i := range 2000 {
		must(t, os.WriteFile(filepath.Join(long, fmt.Sprintf("%04d%s", i, strings.Repeat("n", 200))), nil, 0o644))
	}
	hugeOut, _ := json.Marshal(strings.Repeat("o", MaxOutputBytes+1))
	cases := []struct {
		name, tool string
		args       map[string]any
		want       string // in the result
		max        int    // the result's length is at most this
		lines      int    // list_dir: listed entries (-1: do not count)
	}{
		{"list_dir past the entry cap", "list_dir", map[string]any{"path": "many"},
			"stopped at 10000 entries, the list_dir entry cap (MaxListEntries)", MaxResultBytes, MaxListEntries},
		{"list_dir past the result cap", "list_dir", map[string]any{"path": "long"},
			"the listing reached the 256 KiB result cap (MaxResultBytes)", MaxResultBytes + 200, -1},
		{"list_dir control", "list_dir", map[string]any{"path": "sub"}, "keep.txt", 100, 1},
		{"shell output past its cap", "shell", map[string]any{"command": "head -c 5000000 /dev/zero | tr '\\0' y; head -c 5000000 /dev/zero | tr '\\0' z >&2"},
			"[output truncated]", 2*MaxResultBytes + 200, -1},
		{"shell control", "shell", map[string]any{"command": "echo hello"}, "hello", 100, -1},
		{"path over the path cap", "write_file", map[string]any{"path": strings.Repeat("p/", 2<<20), "content": "x"},
			"over the 4096-byte path cap (MaxPathBytes", 1000, -1},
		{"path control", "write_file", map[string]any{"path": "p/q.txt", "content": "x"}, "wrote 1 bytes", 100, -1},
		{"submit_output over the output cap", "submit_output", map[string]any{"output": json.RawMessage(hugeOut)},
			"over the 16 MiB output cap (MaxOutputBytes)", 1000, -1},
		{"submit_output control", "submit_output", map[string]any{"output": "done"}, "output submitted", 100, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, res := e.call(tc.tool, tc.args)
			if !strings.Contains(res.Content, tc.want) || len(res.Content) > tc.max {
				t.Fatalf("result (%d bytes, max %d) lacks %q: %s", len(res.Content), tc.max, tc.want, cut(res.Content))
			}
			if tc.lines >= 0 {
				n := 0
				for _, l := range strings.Split(res.Content, "\n") {
					if l != "" && !strings.HasPrefix(l, "[") {
						n++
					}
				}
				if n != tc.lines {
					t.Fatalf("listed %d entries, want %d", n, tc.lines)
				}
			}
			t.Logf("%d bytes: %s", len(res.Content), cut(res.Content[max(0, len(res.Content)-200):]))
		})
	}
}

// TestCallResultCeiling: capCall, which Handle applies to every result, built-in or not,
// refusal or not, cuts at MaxCallResultBytes on a character boundary and names the cap;
// a result under it is left alone (the control).
func TestCallResultCeiling(t *testing.T) {
	over := strings.Repeat("a", MaxCallResultBytes-1) + "€€"
	r := &Result{Content: over, Refusal: &Refusal{Msg: over}}
	capCall("x", r)
	if !strings.HasSuffix(r.Content, "the 2 MiB cap on any tool result (MaxCallResultBytes)]") ||
		!strings.HasPrefix(r.Content, strings.Repeat("a", MaxCallResultBytes-1)+"\n[x: result truncated") || len(r.Refusal.Msg) > MaxCallResultBytes+20 {
		t.Fatalf("not capped: %d bytes, ends %q", len(r.Content), r.Content[len(r.Content)-100:])
	}
	under := &Result{Content: "short"}
	capCall("x", under)
	if under.Content != "short" {
		t.Fatalf("control changed: %q", under.Content)
	}
}
