package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeepAliveBinaryChecked: the keep-alive must run in any image, so a dynamically
// linked binary is refused, as is a path the engine's -v would split. Control: a static
// binary (Debian's busybox-static) is accepted, at a plain path and through a symlink.
func TestKeepAliveBinaryChecked(t *testing.T) {
	static := "/bin/busybox"
	if _, err := os.Stat(static); err != nil {
		t.Skip("no /bin/busybox")
	}
	real, _ := filepath.EvalSymlinks(static)
	dir := t.TempDir()
	colon := filepath.Join(dir, "a:b")
	os.Symlink(static, filepath.Join(dir, "link"))
	data, _ := os.ReadFile(static)
	os.WriteFile(colon, data, 0o755)
	cases := []struct {
		exe, wantErr string
	}{
		{static, ""},
		{filepath.Join(dir, "link"), ""},
		{"/bin/ls", "is dynamically linked and cannot be the container sandbox's keep-alive"},
		{colon, "contains ':', ',' or a newline"},
		{filepath.Join(dir, "missing"), "finding lev's own binary"},
	}
	for _, c := range cases {
		exe, r, err := liveness(c.exe)
		if c.wantErr == "" {
			if err != nil || r == nil || exe != real {
				t.Errorf("%s: got %q, %v; want %s accepted", c.exe, exe, err, real)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: err %v, want %q", c.exe, err, c.wantErr)
		}
	}
}
