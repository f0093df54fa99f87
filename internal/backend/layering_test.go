package backend

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHostPackagesKeepTheirLayer holds the "must not" of the host packages' doc comments
// to their real import graphs (go list -deps, so a forbidden package reached through a
// third one counts): a backend never reaches bring-up, the CLI or the podman bindings; the
// containers package never imports lever.yaml's package (it reaches it only through
// guest's egress spec) nor reaches the broker or bring-up; what lev links
// (guestside) carries neither the bindings nor a backend. Each row also names a package
// it must reach, the positive control that the listing is the real graph.
func TestHostPackagesKeepTheirLayer(t *testing.T) {
	const mod = "github.com/lever-jail/lever/"
	const podman = "github.com/containers/podman/"
	cases := []struct {
		pkg    string
		must   string
		forbid []string
		direct []string // forbidden as a direct import only
	}{
		{pkg: "internal/backend", must: mod + "internal/guest", forbid: []string{mod + "internal/bringup", mod + "internal/cli", podman}},
		{pkg: "internal/backend/lima", must: mod + "internal/tail", forbid: []string{mod + "internal/bringup", mod + "internal/cli", mod + "internal/containers", podman}},
		{pkg: "internal/backend/orbstack", must: mod + "internal/backend/forwardrec", forbid: []string{mod + "internal/bringup", mod + "internal/cli", mod + "internal/containers", podman}},
		{pkg: "internal/backend/netns", must: mod + "internal/backend", forbid: []string{mod + "internal/bringup", mod + "internal/cli", mod + "internal/containers", podman}},
		{pkg: "internal/containers", must: podman + "v5/pkg/bindings", forbid: []string{mod + "internal/bringup", mod + "internal/brokerctl", mod + "internal/backend", mod + "internal/cli"}, direct: []string{mod + "internal/config"}},
		{pkg: "internal/guestside", must: mod + "internal/guestside/enrol", forbid: []string{podman, mod + "internal/backend", mod + "internal/bringup", mod + "internal/brokerctl", mod + "internal/containers"}},
		{pkg: "internal/tail", must: "strings", forbid: []string{mod}},
	}
	for _, tc := range cases {
		t.Run(tc.pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", mod+tc.pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", tc.pkg, err, out)
			}
			deps := strings.Fields(string(out))
			has := func(p string) bool {
				for _, d := range deps {
					if d == p || strings.HasPrefix(d, p) && strings.HasSuffix(p, "/") {
						return true
					}
				}
				return false
			}
			if !has(tc.must) {
				t.Fatalf("%s does not reach %s: the listing is not its import graph", tc.pkg, tc.must)
			}
			imps, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", mod+tc.pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list %s: %v\n%s", tc.pkg, err, imps)
			}
			for _, d := range strings.Fields(string(imps)) {
				for _, f := range tc.direct {
					if d == f {
						t.Errorf("%s imports %s", tc.pkg, d)
					}
				}
			}
			for _, f := range tc.forbid {
				for _, d := range deps {
					if d != mod+tc.pkg && (d == f || strings.HasPrefix(d, f) && strings.HasSuffix(f, "/") || strings.HasPrefix(d, f+"/")) {
						t.Errorf("%s reaches %s", tc.pkg, d)
					}
				}
			}
		})
	}
}
