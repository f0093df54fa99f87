package imagebuild

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/levimage"
	"github.com/lever-jail/lever/internal/levimage/debroot"
)

// Requests the helper must refuse before it reads or builds anything.
func TestServeRefusesBadRequests(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	bench := func(trees, mounts, digest string) string {
		return `{"bench":{"trees":` + trees + `,"mounts":` + mounts + `,"lev_digest":` + digest + `}}`
	}
	cases := []struct {
		name string
		body string
		want string
	}{
		{"not JSON", "lev", "reading the image request"},
		{"unknown field", `{"lev_dir":"/var/lib/lever/x/trees/lev-a","recursive":true}`, `unknown field "recursive"`},
		{"unknown field in the workbench's request", `{"bench":{"trees":"/var/lib/lever/x/trees","mounts":["/lever"],"lev_digest":"` + sum + `","paths":["usr"]}}`, `unknown field "paths"`},
		{"the old request (paths from the host)", `{"bench_dir":"/var/lib/lever/x/trees/bench-abc","root":"/","paths":["usr"]}`, `unknown field "bench_dir"`},
		{"relative trees dir", bench(`"trees"`, `["/lever"]`, `"`+sum+`"`), "must be a clean absolute path"},
		{"trees dir that climbs", bench(`"/var/lib/lever/../../etc"`, `["/lever"]`, `"`+sum+`"`), "must be a clean absolute path"},
		{"trees dir is /", bench(`"/"`, `["/lever"]`, `"`+sum+`"`), "must be a clean absolute path below /"},
		{"no trees dir", bench(`""`, `["/lever"]`, `"`+sum+`"`), "must be a clean absolute path"},
		{"workbench without mounts", bench(`"/var/lib/lever/x/trees"`, `[]`, `"`+sum+`"`), "the workbench's mounts are missing"},
		{"relative workbench mount", bench(`"/var/lib/lever/x/trees"`, `["lever"]`, `"`+sum+`"`), `the workbench's mount "lever" must be a clean absolute path`},
		{"workbench mount that climbs", bench(`"/var/lib/lever/x/trees"`, `["/lever/../etc"]`, `"`+sum+`"`), "must be a clean absolute path"},
		{"workbench mount on /", bench(`"/var/lib/lever/x/trees"`, `["/"]`, `"`+sum+`"`), "must be a clean absolute path below /"},
		{"unsorted workbench mounts", bench(`"/var/lib/lever/x/trees"`, `["/run/lever-bench","/lever"]`, `"`+sum+`"`), "must be sorted, each once"},
		{"repeated workbench mount", bench(`"/var/lib/lever/x/trees"`, `["/lever","/lever"]`, `"`+sum+`"`), "must be sorted, each once"},
		{"short lev digest", bench(`"/var/lib/lever/x/trees"`, `["/lever"]`, `"abc"`), "is not a hex sha256"},
		{"lev digest with a prefix", bench(`"/var/lib/lever/x/trees"`, `["/lever"]`, `"sha256:`+sum[7:]+`"`), "is not a hex sha256"},
		{"upper-case lev digest", bench(`"/var/lib/lever/x/trees"`, `["/lever"]`, `"`+strings.ToUpper(sum)+`"`), "is not a hex sha256"},
		{"no lev digest", bench(`"/var/lib/lever/x/trees"`, `["/lever"]`, `""`), "is not a hex sha256"},
		{"lev dir that climbs", `{"lev_dir":"/var/lib/lever/../../etc/x"}`, "must be a clean absolute path"},
		{"relative lev dir", `{"lev_dir":"trees/lev"}`, "must be a clean absolute path"},
		{"relative lev mount", `{"lev_dir":"/var/lib/lever/x/trees/lev-a","lev_mounts":["run/lever"]}`, `lev's mount "run/lever" must be a clean absolute path`},
		{"unsorted lev mounts", `{"lev_dir":"/var/lib/lever/x/trees/lev-a","lev_mounts":["/run/lever","/lever"]}`, "must be sorted"},
		{"lev mounts without lev's tree", `{"lev_mounts":["/run/lever"],"bench":{"trees":"/var/lib/lever/x/trees","mounts":["/lever"],"lev_digest":"` + sum + `"}}`, "lev's mounts without lev's tree"},
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

// benchRoot is a fake guest root holding each workbench package (and dpkg), one
// executable each, as root's files.
func benchRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	os.Chmod(root, 0o755)
	var status strings.Builder
	fmt.Fprintf(&status, "Package: dpkg\nStatus: install ok installed\nArchitecture: amd64\n\n")
	write := func(p, body string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range levimage.WorkbenchPackages {
		p := strings.Split(w, "|")[0]
		fmt.Fprintf(&status, "Package: %s\nStatus: install ok installed\nArchitecture: amd64\n\n", p)
		write("var/lib/dpkg/info/"+p+".list", "/.\n/usr\n/usr/bin\n/usr/bin/"+p+"\n", 0o644)
		write("usr/bin/"+p, "#!/bin/sh\n", 0o755)
	}
	write("var/lib/dpkg/info/dpkg.list", "/.\n/usr\n/usr/bin\n", 0o644)
	write("var/lib/dpkg/status", status.String(), 0o644)
	write("etc/ssl/certs/ca-certificates.crt", "a CA\n", 0o644)
	return root
}

func ask(t *testing.T, root string, req Request) Response {
	t.Helper()
	body, _ := json.Marshal(req)
	var out bytes.Buffer
	if err := serve(bytes.NewReader(body), &out, root); err != nil {
		t.Fatal(err)
	}
	var resp Response
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestServeBench: the helper reads the guest's packages itself, names the workbench's
// tree from the package-state digest as bring-up does (BenchRequest.Dir, the shared
// levimage.TreeName) and makes it beside lev's tree, whose /lev it links; asked again it
// finds the tree by that name without reading the file lists; a package change names a
// new tree; a guest without dpkg is said so (and lev's tree is made all the same).
func TestServeBench(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the trees are root's: run as root")
	}
	root := benchRoot(t)
	trees := filepath.Join(t.TempDir(), "inst", "trees")
	self, _ := os.Executable()
	digest, err := levimage.FileDigest(self)
	if err != nil {
		t.Fatal(err)
	}
	br := BenchRequest{Trees: trees, Mounts: []string{"/lever", "/lever/wa", "/run/lever-bench"}, LevDigest: digest}
	levDir := filepath.Join(trees, "lev-0123-abcd")
	req := Request{LevDir: levDir, LevMounts: []string{"/run/lever"}, Bench: &br}
	if err := req.check(); err != nil {
		t.Fatalf("a good request is refused: %v", err) // the refusals' positive control
	}
	resp := ask(t, root, req)
	b := resp.Bench
	sum, err := debroot.StateDigest(root)
	if err != nil || b == nil || resp.Lev == nil || resp.Lev.Found {
		t.Fatalf("%+v %v", resp, err)
	}
	ref := levimage.WorkbenchRef(levimage.DebianBase, sum, digest)
	if b.StatusSum != sum || b.Ref != ref || b.Dir != filepath.Join(trees, levimage.TreeName("bench", ref, br.Mounts)) || b.Dir != br.Dir(sum) ||
		b.Packages != len(levimage.WorkbenchPackages) || b.Entries == 0 || b.NoDpkg != "" {
		t.Fatalf("workbench %+v (digest %s)", *b, sum)
	}
	for _, p := range []string{"usr/bin/git", "usr/bin/make", "lever/wa", "run/lever-bench"} {
		if _, err := os.Lstat(filepath.Join(b.Dir, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	var l1, l2 syscall.Stat_t
	if syscall.Lstat(filepath.Join(levDir, "lev"), &l1) != nil || syscall.Lstat(filepath.Join(b.Dir, "lev"), &l2) != nil || l1.Ino != l2.Ino {
		t.Errorf("the workbench's /lev is not lev's tree's (inodes %d, %d)", l1.Ino, l2.Ino)
	}

	// again: found by the digest alone (the file lists are not read: gone here), and lev's
	// tree found whole (a restarted guest is asked for both: it was down when observed)
	os.Rename(filepath.Join(root, "var/lib/dpkg/info"), filepath.Join(root, "var/lib/dpkg/info.away"))
	resp2 := ask(t, root, Request{LevDir: levDir, LevMounts: []string{"/run/lever"}, Bench: &br})
	again := resp2.Bench
	if again == nil || again.Dir != b.Dir || again.Entries != 0 || again.Packages != 0 || again.StatusSum != sum {
		t.Errorf("asked again: %+v", again)
	}
	if resp2.Lev == nil || !resp2.Lev.Found {
		t.Errorf("asked again, lev's tree: %+v, want found whole", resp2.Lev)
	}
	os.Rename(filepath.Join(root, "var/lib/dpkg/info.away"), filepath.Join(root, "var/lib/dpkg/info"))

	// a package state change (a local CA) names and makes another tree
	os.WriteFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"), []byte("a CA\nanother CA\n"), 0o644)
	changed := ask(t, root, Request{Bench: &br}).Bench
	if changed == nil || changed.Dir == b.Dir || changed.StatusSum == sum || changed.Entries == 0 {
		t.Errorf("after a change: %+v", changed)
	}
	if fi, err := os.Stat(filepath.Join(changed.Dir, "lev")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("the second workbench's /lev: %v %v", fi, err)
	}

	// no dpkg database: said so, nothing made for the workbench; lev's tree still made
	os.Remove(filepath.Join(root, "var/lib/dpkg/status"))
	lev2 := filepath.Join(trees, "lev-4567-abcd")
	none := ask(t, root, Request{LevDir: lev2, Bench: &br})
	if none.Bench == nil || !strings.Contains(none.Bench.NoDpkg, "no /var/lib/dpkg/status") || none.Bench.Dir != "" || none.Lev == nil {
		t.Errorf("no dpkg: %+v %+v", none.Lev, none.Bench)
	}
	if _, err := os.Stat(filepath.Join(lev2, "lev")); err != nil {
		t.Error(err)
	}
	if ents, _ := os.ReadDir(trees); len(ents) != 4 {
		t.Errorf("trees: %v", ents)
	}
}

// TestServeBenchPlanningFails: a guest missing a workbench package is refused naming it,
// and no workbench tree is left behind.
func TestServeBenchPlanningFails(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the trees are root's: run as root")
	}
	root := benchRoot(t)
	os.Remove(filepath.Join(root, "var/lib/dpkg/info/git.list"))
	trees := filepath.Join(t.TempDir(), "trees")
	body, _ := json.Marshal(Request{Bench: &BenchRequest{Trees: trees, Mounts: []string{"/lever"}, LevDigest: strings.Repeat("1", 64)}})
	var out bytes.Buffer
	err := serve(bytes.NewReader(body), &out, root)
	if err == nil || !strings.Contains(err.Error(), "planning the workbench: package git has no file list") || out.Len() != 0 {
		t.Fatalf("err %v, answer %q", err, out.String())
	}
	if ents, _ := os.ReadDir(trees); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestServeRefusesAnOccupiedTreeName: asked for lev's tree at a name something else holds
// (here a symlink to a whole tree elsewhere), the helper refuses, naming it, rather than
// answering "found" for it; the same request at a free name makes the tree (the control).
func TestServeRefusesAnOccupiedTreeName(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the trees are root's: run as root")
	}
	trees := filepath.Join(t.TempDir(), "inst", "trees")
	made := filepath.Join(trees, "lev-0123-abcd")
	resp := ask(t, "/", Request{LevDir: made, LevMounts: []string{"/run/lever"}})
	if resp.Lev == nil || resp.Lev.Found {
		t.Fatalf("a free name: %+v, want the tree made", resp.Lev)
	}
	taken := filepath.Join(trees, "lev-4567-abcd")
	if err := os.Symlink(made, taken); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(Request{LevDir: taken, LevMounts: []string{"/run/lever"}})
	err := serve(bytes.NewReader(body), io.Discard, "/")
	if err == nil || !strings.Contains(err.Error(), taken+" is there but is not a tree lever made (a symlink)") {
		t.Errorf("a symlink at lev's tree's name: %v", err)
	}
}
