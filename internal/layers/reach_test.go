package layers

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// TestHostPackagesKeepTheirLayer holds the "must not" of the packages' doc comments to their
// real import graphs (go list -deps, so a forbidden package reached through a third one
// counts): a backend never reaches bring-up, the CLI or the podman bindings; the containers
// package never imports lever.yaml's package (it reaches it only through guest's egress
// spec) nor reaches the broker or bring-up; what lev links (guestside, lev's CLI) carries
// neither the bindings, a backend, the broker nor bring-up; the broker reaches no backend,
// bring-up, guest helper or lev; lever.yaml's package reaches only the path leaves; the
// egress package is pure (the standard library, and no I/O package imported). Each row also
// names a package it must reach, the positive control that the listing is the real graph.
func TestHostPackagesKeepTheirLayer(t *testing.T) {
	const podman = "github.com/containers/podman/"
	host := []string{mod + "internal/bringup", mod + "internal/cli", mod + "internal/brokerctl", mod + "internal/backend", mod + "internal/containers", mod + "internal/dashboard", podman}
	cases := []struct {
		pkg    string
		must   string
		forbid []string
		direct []string // forbidden as a direct import only
		only   []string // the module packages it may reach, when set
	}{
		{pkg: "internal/backend", must: mod + "internal/guest", forbid: []string{mod + "internal/bringup", mod + "internal/cli", podman}},
		{pkg: "internal/backend/lima", must: mod + "internal/tail", forbid: []string{mod + "internal/bringup", mod + "internal/cli", mod + "internal/containers", podman}},
		{pkg: "internal/backend/orbstack", must: mod + "internal/backend/forwardrec", forbid: []string{mod + "internal/bringup", mod + "internal/cli", mod + "internal/containers", podman}},
		{pkg: "internal/backend/netns", must: mod + "internal/backend", forbid: []string{mod + "internal/bringup", mod + "internal/cli", mod + "internal/containers", podman}},
		{pkg: "internal/containers", must: podman + "v5/pkg/bindings", forbid: []string{mod + "internal/bringup", mod + "internal/brokerctl", mod + "internal/backend", mod + "internal/cli"}, direct: []string{mod + "internal/config"}},
		{pkg: "internal/guestside", must: mod + "internal/guestside/enrol", forbid: []string{podman, mod + "internal/backend", mod + "internal/bringup", mod + "internal/brokerctl", mod + "internal/containers"}},
		{pkg: "internal/lev/cli", must: mod + "internal/guestside", forbid: append(append([]string{}, host...), mod+"internal/acceptance", mod+"internal/doctor")},
		{pkg: "internal/lev/runner", must: mod + "internal/lev/pipeline", forbid: append(append([]string{}, host...), mod+"internal/config", mod+"internal/guest", mod+"internal/guestside")},
		{pkg: "internal/brokerctl", must: mod + "internal/cap/ticket", forbid: []string{mod + "internal/bringup", mod + "internal/cli", mod + "internal/backend", mod + "internal/acceptance", mod + "internal/guestside", mod + "internal/lev/", mod + "internal/dashboard"}},
		{pkg: "internal/config", must: mod + "internal/fspath", only: []string{mod + "internal/config", mod + "internal/fspath", mod + "internal/beneath"}},
		{pkg: "internal/egress", must: "net/netip", forbid: []string{mod}, direct: []string{"os", "os/exec", "net", "net/http", "syscall", "io/ioutil", "io/fs"}},
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
			if tc.only != nil {
				for _, d := range deps {
					if strings.HasPrefix(d, mod) && !contains(tc.only, d) {
						t.Errorf("%s reaches %s, outside %v", tc.pkg, d, tc.only)
					}
				}
			}
		})
	}
}

// TestLevRuntimeReachesNoHostPackage holds every package of lev's runtime (internal/lev/...
// but its CLI, which links the guest helpers) to the jail's side of the line: through the
// module's import graph it reaches only lev's own packages and the leaves, never lever.yaml,
// the guest seam, a backend, the broker, the containers package or bring-up.
func TestLevRuntimeReachesNoHostPackage(t *testing.T) {
	g := moduleGraph(t)
	leaves := layers[0].pkgs
	checked := 0
	for pkg := range g {
		if !strings.HasPrefix(pkg, "internal/lev/") || pkg == "internal/lev/cli" {
			continue
		}
		checked++
		for _, d := range reach(g, pkg) {
			if !strings.HasPrefix(d, "internal/lev/") && !contains(leaves, d) {
				t.Errorf("%s reaches %s, outside lev's runtime and the leaves", pkg, d)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d lev packages listed: the listing is broken", checked)
	}
	// Positive control: the walk is transitive (the runner reaches the sandbox through the pipeline).
	if !contains(reach(g, "internal/lev/runner"), "internal/lev/deathsig") {
		t.Fatal("the reach walk is not transitive")
	}
}

// reach is every module package pkg imports, directly or through others.
func reach(g graph, pkg string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for _, d := range g[p] {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(pkg)
	var out []string
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
