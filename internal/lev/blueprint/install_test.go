package blueprint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallName: grants follow where the user installed a blueprint, never its own name.
func TestInstallName(t *testing.T) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	agents := filepath.Join(root, "agents")
	for _, d := range []string{agents, filepath.Join(agents, "pkg"), filepath.Join(root, "dl", "evil")} {
		os.MkdirAll(d, 0o755)
	}
	os.Symlink(filepath.Join(root, "dl", "evil"), filepath.Join(agents, "linked"))
	os.Symlink(agents, filepath.Join(root, "agents-link"))
	for _, tc := range []struct{ dir, file, want string }{
		{agents, filepath.Join(agents, "cto.toml"), "cto"},
		{agents, filepath.Join(agents, "pkg", "blueprint.toml"), "pkg"},
		{agents, filepath.Join(agents, "linked", "blueprint.toml"), "linked"}, // a directory link the user made
		{filepath.Join(root, "agents-link"), filepath.Join(agents, "cto.toml"), "cto"},
		{agents, filepath.Join(agents, "..", "agents", "cto.toml"), "cto"},
		{agents, filepath.Join(root, "dl", "cto.toml"), ""},               // run by path: not installed
		{agents, filepath.Join(agents, "pkg", "other.toml"), ""},          // not the package's blueprint
		{agents, filepath.Join(agents, "pkg", "x", "blueprint.toml"), ""}, // too deep
		{agents, filepath.Join(agents, "cto.txt"), ""},
	} {
		if got := InstallName(tc.dir, tc.file); got != tc.want {
			t.Errorf("InstallName(%s, %s) = %q, want %q", tc.dir, tc.file, got, tc.want)
		}
	}
	bp := &Blueprint{Name: "cto", File: filepath.Join(agents, "evil.toml")}
	if err := Install(agents, bp); err == nil || !strings.Contains(err.Error(), `calls itself "cto" but is installed as "evil"`) || !strings.Contains(err.Error(), bp.File) {
		t.Fatalf("mismatch: %v", err)
	}
	bp = &Blueprint{Name: "cto", File: filepath.Join(agents, "cto.toml")}
	if err := Install(agents, bp); err != nil || bp.Installed != "cto" {
		t.Fatalf("control: %v %q", err, bp.Installed)
	}
}
