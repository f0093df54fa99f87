package debroot

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// workbenchLike is a wanted list of the default workbench's kind (levimage's own list
// cannot be imported here: levimage imports this package).
var workbenchLike = []string{"bash", "coreutils", "git", "make", "mawk|gawk", "findutils"}

// TestPlanRootMatchesResolveHere: on this machine's own dpkg database, the plan made from
// the closure's lists alone is the plan made from every list, and only the closure's lists
// were read.
func TestPlanRootMatchesResolveHere(t *testing.T) {
	if _, err := os.Stat("/var/lib/dpkg/status"); err != nil {
		t.Skip("no dpkg database on this machine")
	}
	full, err := ReadInputs("/")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Resolve(full, workbenchLike)
	if err != nil {
		t.Skipf("this machine lacks a workbench package: %v", err)
	}
	in, got, err := PlanRoot("/", workbenchLike)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PlanRoot's plan differs from Resolve's: %d packages / %d paths, want %d / %d", len(got.Packages), len(got.Paths), len(want.Packages), len(want.Paths))
	}
	if len(in.Lists) != len(got.Packages) || len(in.Lists) >= len(full.Lists) {
		t.Errorf("read %d lists for %d packages (every list: %d)", len(in.Lists), len(got.Packages), len(full.Lists))
	}
	for name, l := range in.Lists {
		if !reflect.DeepEqual(l, full.Lists[name]) {
			t.Errorf("list %s read differently", name)
		}
	}
	all := len(full.Lists)
	// the rest of what was read is ReadInputs' (the lists apart)
	in.Lists, full.Lists = nil, nil
	if !reflect.DeepEqual(in, full) {
		t.Errorf("PlanRoot's inputs differ from ReadInputs':\n%s", inputsDiff(in, full))
	}
	t.Logf("this machine: %d packages, %d paths, %d of %d lists read", len(got.Packages), len(got.Paths), len(got.Packages), all)
}

// TestPlanRootFakeRoots: the lists PlanRoot reads and refuses, one change per row, each
// against Resolve over ReadInputs on the same root.
func TestPlanRootFakeRoots(t *testing.T) {
	status := func(extra string) func(t *testing.T, root string) {
		return func(t *testing.T, root string) {
			p := filepath.Join(root, "var/lib/dpkg/status")
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			mkfile(t, p, string(b)+extra)
		}
	}
	info := func(root, name string) string { return filepath.Join(root, "var/lib/dpkg/info", name) }
	libc := "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nMulti-Arch: same\n\n"
	cases := []struct {
		name    string
		change  func(t *testing.T, root string)
		wantErr string
		lists   []string // the lists read, by name
	}{
		{"closure's lists only", status(libc + "Package: unrelated\nStatus: install ok installed\nArchitecture: amd64\n\n"), "", []string{"dash", "libc6:amd64"}},
		{"architecture-qualified list first", func(t *testing.T, root string) {
			status(libc)(t, root)
			mkfile(t, info(root, "libc6.list"), "/usr/lib/plain\n")
		}, "", []string{"dash", "libc6:amd64"}},
		{"unqualified list when there is no qualified one", func(t *testing.T, root string) {
			status(libc)(t, root)
			os.Remove(info(root, "libc6:amd64.list"))
			mkfile(t, info(root, "libc6.list"), "/usr/lib/plain\n")
		}, "", []string{"dash", "libc6"}},
		{"a package without an architecture, its name with an underscore", func(t *testing.T, root string) {
			b, _ := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
			mkfile(t, filepath.Join(root, "var/lib/dpkg/status"), strings.Replace(string(b), "Depends: libc6", "Depends: old_name", 1)+
				"Package: old_name\nStatus: install ok installed\n\n")
			mkfile(t, info(root, "old_name.list"), "/usr/lib/old\n")
		}, "", []string{"dash", "old_name"}},
		{"a symlinked list is not read", func(t *testing.T, root string) {
			status(libc)(t, root)
			os.Remove(info(root, "libc6:amd64.list"))
			mklink(t, "dash.list", info(root, "libc6:amd64.list"))
		}, "package libc6 has no file list", nil},
		{"an empty list is no list", func(t *testing.T, root string) {
			status(libc)(t, root)
			mkfile(t, info(root, "libc6:amd64.list"), "")
		}, "package libc6 has no file list", nil},
		{"a package name that is not one", func(t *testing.T, root string) {
			// dash depends on it: the closure holds it, and its name would be a path
			b, _ := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
			mkfile(t, filepath.Join(root, "var/lib/dpkg/status"), strings.Replace(string(b), "Depends: libc6", "Depends: ../../../etc/x", 1)+
				"Package: ../../../etc/x\nStatus: install ok installed\nArchitecture: amd64\n\n")
			mkfile(t, filepath.Join(root, "etc/x.list"), "/etc/shadow\n")
		}, `names a package "../../../etc/x:amd64": not a package name`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeRoot(t, "amd64")
			mkfile(t, info(root, "libc6:amd64.list"), "/.\n/usr/lib/x86_64-linux-gnu/libc.so.6\n")
			tc.change(t, root)
			in, plan, err := PlanRoot(root, []string{"dash"})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range in.Lists {
				names = append(names, n)
			}
			if !sameSet(names, tc.lists) {
				t.Errorf("lists read %v, want %v", names, tc.lists)
			}
			full, err := ReadInputs(root)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Resolve(full, []string{"dash"})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(plan, want) {
				t.Errorf("plan %+v, Resolve's %+v", plan, want)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}
