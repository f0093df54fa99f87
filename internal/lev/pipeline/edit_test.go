package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEditFile: exact-match semantics, one edit or several; any failing edit fails the
// call and leaves the file as it was, byte for byte.
func TestEditFile(t *testing.T) {
	const orig = "alpha beta\nbeta gamma\ndelta\n"
	cases := []struct {
		name    string
		args    map[string]any
		want    string // the file after; orig when nothing may be written
		msg     string
		refused string // the refusal step, for a call refused before it runs
	}{
		{"single unique", map[string]any{"old_string": "delta", "new_string": "DELTA"}, "alpha beta\nbeta gamma\nDELTA\n", "replaced 1 occurrence(s)", ""},
		{"single not unique", map[string]any{"old_string": "beta", "new_string": "B"}, orig, "old_string occurs 2 times in f.txt; make it unique or set replace_all; nothing was written", ""},
		{"single replace_all", map[string]any{"old_string": "beta", "new_string": "B", "replace_all": true}, "alpha B\nB gamma\ndelta\n", "replaced 2 occurrence(s)", ""},
		{"single not found", map[string]any{"old_string": "omega", "new_string": "x"}, orig, "old_string not found in f.txt", ""},
		{"deletion", map[string]any{"old_string": "delta\n", "new_string": ""}, "alpha beta\nbeta gamma\n", "replaced 1", ""},
		{"edits in order", map[string]any{"edits": []map[string]any{
			{"old_string": "alpha", "new_string": "ALPHA"},
			{"old_string": "ALPHA beta", "new_string": "first line"}, // sees the edit before it
			{"old_string": "beta", "new_string": "B", "replace_all": true},
		}}, "first line\nB gamma\ndelta\n", "replaced 3 occurrence(s)", ""},
		{"edits: a later one fails, nothing written", map[string]any{"edits": []map[string]any{
			{"old_string": "alpha", "new_string": "ALPHA"},
			{"old_string": "omega", "new_string": "x"},
		}}, orig, "edits[1]: old_string not found in f.txt; nothing was written", ""},
		{"edits: a later one not unique, nothing written", map[string]any{"edits": []map[string]any{
			{"old_string": "delta", "new_string": "D"},
			{"old_string": "beta", "new_string": "x"},
		}}, orig, "edits[1]: old_string occurs 2 times", ""},
		{"edits: the result would pass the write cap, nothing written", map[string]any{"edits": []map[string]any{
			{"old_string": "delta", "new_string": "D"},
			{"old_string": "a", "new_string": strings.Repeat("z", 3<<20), "replace_all": true},
		}}, orig, "over the 16 MiB write cap", ""},
		{"both forms", map[string]any{"old_string": "a", "new_string": "b", "edits": []map[string]any{{"old_string": "x", "new_string": "y"}}}, orig, "not both", StepOffer},
		{"empty edits", map[string]any{"edits": []map[string]any{}}, orig, `"edits" is empty`, StepOffer},
		{"edit without old_string", map[string]any{"edits": []map[string]any{{"old_string": "", "new_string": "y"}}}, orig, `edits[0]: argument "old_string" is required`, StepOffer},
		{"unknown key in an edit", map[string]any{"edits": []map[string]any{{"old_string": "a", "new_string": "y", "path": "../x"}}}, orig, "bad arguments", StepOffer},
		{"neither form", map[string]any{}, orig, `"old_string" is required`, StepOffer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newFenceEnv(t)
			f := filepath.Join(e.wd, "f.txt")
			mustWrite(t, f, orig)
			tc.args["path"] = "f.txt"
			_, res := e.call("edit_file", tc.args)
			if !strings.Contains(res.Content, tc.msg) {
				t.Errorf("result %q lacks %q", res.Content, tc.msg)
			}
			if tc.refused != "" && (res.Refusal == nil || res.Refusal.Step != tc.refused) {
				t.Errorf("want a refusal at %s, got %+v", tc.refused, res.Refusal)
			}
			if b, _ := os.ReadFile(f); string(b) != tc.want {
				t.Errorf("file now %.200q, want %q", b, tc.want)
			}
		})
	}
}

// TestEditFileFenced: the edits form is fenced like the single form: a path outside the
// workdir (granted for reading or not) is refused and the target is unchanged.
func TestEditFileFenced(t *testing.T) {
	e := newFenceEnv(t)
	for _, p := range []string{"../../docs/readme.md", e.home + "/docs/readme.md", "docslink/readme.md"} {
		_, res := e.call("edit_file", map[string]any{"path": p, "edits": []map[string]any{{"old_string": "granted", "new_string": "OWNED"}}})
		if res.Refusal == nil || res.Refusal.Step != StepFence {
			t.Errorf("%s: not refused at the fence: %s", p, res.Content)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.home, "docs", "readme.md")); string(b) != "granted docs" {
		t.Fatalf("the granted file was edited: %q", b)
	}
}
