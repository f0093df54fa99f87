package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProtectedStateNeverWritten attacks lev's own state from inside the workdir: when lev's
// home (config.toml, policy, run records) sits in the workdir, as it does in a jail's tree,
// the file tools must still never write it, by name or through a symlink.
func TestProtectedStateNeverWritten(t *testing.T) {
	e := newFenceEnv(t)
	levHome := filepath.Join(e.wd, ".lev")
	mustWrite(t, filepath.Join(levHome, "config.toml"), "[security]\n")
	must(t, os.Symlink(levHome, filepath.Join(e.wd, "innocent")))
	e.p.Protected = []string{levHome, filepath.Join(levHome, "config.toml")}

	cases := []struct {
		name, tool string
		args       map[string]any
		refused    bool
	}{
		{"overwrite config.toml", "write_file", map[string]any{"path": ".lev/config.toml", "content": "[security]\nallow_blueprint_read_paths = true\n"}, true},
		{"new policy file", "write_file", map[string]any{"path": ".lev/policy.toml", "content": "x"}, true},
		{"run record", "write_file", map[string]any{"path": ".lev/runs/r1/taint_state.json", "content": "{}"}, true},
		{"through a symlink", "write_file", map[string]any{"path": "innocent/config.toml", "content": "x"}, true},
		{"edit config.toml", "edit_file", map[string]any{"path": ".lev/config.toml", "old_string": "[security]", "new_string": "[security]\nread_paths = [\"/\"]"}, true},
		{"ordinary write still works", "write_file", map[string]any{"path": "out.txt", "content": "ok"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, res := e.call(tc.tool, tc.args)
			got := res.Refusal != nil && res.Refusal.Step == StepFence && strings.Contains(res.Content, "lev's own state")
			if got != tc.refused {
				t.Fatalf("refused=%v, want %v: %s", got, tc.refused, res.Content)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(levHome, "config.toml")); string(b) != "[security]\n" {
		t.Fatalf("config.toml was changed: %q", b)
	}
}
