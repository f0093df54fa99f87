package imagebuild

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Requests the helper must refuse before it reads or builds anything.
func TestServeRefusesBadRequests(t *testing.T) {
	cases := []struct {
		name string
		body string
		want string
	}{
		{"not JSON", "lev", "reading the image request"},
		{"unknown field", `{"lev_dir":"/var/lib/lever/x/trees/lev-a","recursive":true}`, `unknown field "recursive"`},
		{"workbench without paths", `{"bench_dir":"/var/lib/lever/x/trees/bench-abc","root":"/"}`, "a workbench needs a root and paths"},
		{"workbench without a root", `{"bench_dir":"/var/lib/lever/x/trees/bench-abc","paths":["usr"]}`, "a workbench needs a root and paths"},
		{"workbench with a relative root", `{"bench_dir":"/var/lib/lever/x/trees/bench-abc","root":"usr","paths":["bin"]}`, "must be clean absolute paths"},
		{"workbench dir that climbs", `{"bench_dir":"/var/lib/lever/../../etc","root":"/","paths":["bin"]}`, "must be clean absolute paths"},
		{"lev dir that climbs", `{"lev_dir":"/var/lib/lever/../../etc/x"}`, "must be a clean absolute path"},
		{"relative lev dir", `{"lev_dir":"trees/lev"}`, "must be a clean absolute path"},
		{"nothing asked", `{}`, "asks for nothing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := Serve(strings.NewReader(tc.body), &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("answered %q to a refused request", out.String())
			}
		})
	}
}

// The tree goes only under directories root owns and only root can write: a parent the
// run user could rename or fill is refused before anything is made.
func TestRootOwnedDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	base := t.TempDir() // under /tmp: sticky, so allowed
	os.Chmod(base, 0o755)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	other := filepath.Join(base, "other")
	os.Mkdir(other, 0o755)
	os.Chown(other, 1234, 1234)
	link := filepath.Join(base, "link")
	os.Symlink(base, link)
	sticky := filepath.Join(base, "sticky")
	os.Mkdir(sticky, 0o755)
	os.Chmod(sticky, 0o777|os.ModeSticky)
	for _, tc := range []struct {
		dir  string
		want string
	}{
		{filepath.Join(open, "wb"), "not a root-owned directory only root can write"},
		{filepath.Join(other, "wb"), "not a root-owned directory only root can write"},
		{filepath.Join(link, "wb"), "not a root-owned directory only root can write"},
		// sticky on the way is fine (the made row goes through /tmp), but not where the
		// trees are listed: anyone could add a name there
		{sticky, "not a root-owned directory only root can write"},
		{filepath.Join(base, "made", "wb"), ""}, // control: made, root's, 0755
	} {
		err := rootOwnedDirs(tc.dir)
		if tc.want == "" {
			fi, serr := os.Stat(tc.dir)
			if err != nil || serr != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: %v %v", tc.dir, err, serr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.dir, err)
		}
		if _, err := os.Lstat(tc.dir); err == nil && tc.dir != sticky {
			t.Errorf("%s was made", tc.dir)
		}
	}
}
