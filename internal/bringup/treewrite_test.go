package bringup

import (
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

// TestTreeWarning: the warning names the run user, the tree and the failure, and the fix
// fits the substrate (the netns run user is a host user; a VM writes the shared tree as
// the host's user); nothing when the probe passed or did not run.
func TestTreeWarning(t *testing.T) {
	cases := []struct {
		name    string
		inPlace bool
		obs     Observed
		want    []string
	}{
		{"not tried (no run user yet)", false, Observed{}, nil},
		{"writable", true, Observed{TreeChecked: true, TreeWritable: true}, nil},
		{"netns, not writable", true, Observed{TreeChecked: true, TreeWriteErr: "mktemp: Permission denied"},
			[]string{"the run user lever cannot write the tree /p/tree", `"mktemp: Permission denied"`, "fix: give lever the tree (chown -R lever /p/tree)", "LEVER_NETNS_RUN_USER=OWNER"}},
		{"VM, not writable", false, Observed{TreeChecked: true, TreeWriteErr: "mktemp: Read-only file system"},
			[]string{"the run user lever cannot write the tree /p/tree (in the guest /lever", "Read-only file system", `chown -R "$USER" /p/tree && chmod -R u+w /p/tree`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := &Instance{cfg: &config.Config{TreePath: "/p/tree"}, RunUser: "lever", InPlace: c.inPlace, TreeSrc: "/lever"}
			if c.inPlace {
				in.TreeSrc = "/p/tree"
			}
			got := in.treeWarning(c.obs)
			if c.want == nil {
				if got != "" {
					t.Fatalf("warned: %s", got)
				}
				return
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("warning %q lacks %q", got, w)
				}
			}
		})
	}
}
