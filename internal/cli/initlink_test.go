package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend"
)

// TestInitFollowsNoLink: lever init DIR with links planted in DIR (.lev, .lev/agents or
// lever.yaml pointing out of DIR, to a place that exists or not) refuses with exit 2 and
// an error naming the path, and creates nothing outside DIR nor in it; the control is
// the same DIR without the link, where init writes both files inside DIR.
func TestInitFollowsNoLink(t *testing.T) {
	t.Setenv("LEVER_DEV_NETNS", "1")
	initDescriptors = func() []backend.Descriptor { return []backend.Descriptor{probeDesc("lima", true, true)} }
	t.Cleanup(func() { initDescriptors = backend.All })
	cases := []struct {
		name  string
		plant func(dir, elsewhere string) error
		want  string // the path the error names, relative to DIR
	}{
		{".lev a link to an existing directory", func(dir, elsewhere string) error {
			return os.Symlink(elsewhere, filepath.Join(dir, ".lev"))
		}, ".lev/agents/starter.toml: a symlink is on its path"},
		{".lev a link to nowhere yet", func(dir, elsewhere string) error {
			return os.Symlink(filepath.Join(elsewhere, "new"), filepath.Join(dir, ".lev"))
		}, ".lev/agents/starter.toml: a symlink is on its path"},
		{".lev/agents a link", func(dir, elsewhere string) error {
			os.Mkdir(filepath.Join(dir, ".lev"), 0o755)
			return os.Symlink(elsewhere, filepath.Join(dir, ".lev", "agents"))
		}, ".lev/agents/starter.toml: a symlink is on its path"},
		{"lever.yaml a link to nowhere yet", func(dir, elsewhere string) error {
			return os.Symlink(filepath.Join(elsewhere, "lever.yaml"), filepath.Join(dir, "lever.yaml"))
		}, "lever.yaml already exists"},
		{"control: no link", func(dir, elsewhere string) error { return nil }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "proj")
			elsewhere := filepath.Join(t.TempDir(), "elsewhere")
			os.Mkdir(dir, 0o755)
			os.Mkdir(elsewhere, 0o755)
			if err := tc.plant(dir, elsewhere); err != nil {
				t.Fatal(err)
			}
			before := listTree(t, dir)
			code, out, errs := lever("init", dir)
			if tc.want == "" {
				if code != 0 {
					t.Fatalf("control: exit %d: %s%s", code, out, errs)
				}
				for _, f := range []string{initConfigFile, initBlueprintFile} {
					if st, err := os.Lstat(filepath.Join(dir, f)); err != nil || !st.Mode().IsRegular() {
						t.Errorf("control: %s not written in DIR: %v", f, err)
					}
				}
			} else {
				if code != 2 || !strings.Contains(errs, filepath.Join(dir, tc.want)) {
					t.Errorf("exit %d, stderr %q; want 2 naming %q", code, errs, filepath.Join(dir, tc.want))
				}
				if after := listTree(t, dir); !reflect.DeepEqual(before, after) {
					t.Errorf("a refused init changed DIR: %v -> %v", before, after)
				}
			}
			if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
				t.Errorf("init created outside DIR: %v", ents)
			}
		})
	}
}
