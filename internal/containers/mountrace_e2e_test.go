//go:build e2e

package containers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/guestside/mountcheck"
	"github.com/lever-jail/lever/internal/levimage"
)

// TestMountsProvenAfterInit attacks the window between a check of a worker's dir and the
// runtime's mount of it, on a real rootless podman: the manager (which writes the whole
// tree) swaps the worker's dir for a symlink to a directory of the run user's outside the
// tree, and back. A check of the source before the start can fall on the directory, while
// the runtime mounts the symlink's target; bring-up's check runs after podman init, on
// what the container holds, and lets nothing in the container run unless it is the tree's.
//
// Each refused row first proves the payload arrived: the initialised container's root
// holds the outside directory's file (the runtime did follow the symlink). The controls
// are the untouched dirs, which pass, and whose containers run and read the tree's files.
func TestMountsProvenAfterInit(t *testing.T) {
	g := newTestGuest(t)
	im, err := levimage.Build(levimage.Spec{LevBinary: buildProbe(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.client.LoadArchive(im.Archive); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(g.home, "tree")
	outside := filepath.Join(g.home, "outside") // the run user's, as its runtime dir is
	for _, d := range []string{filepath.Join(tree, "w1"), filepath.Join(tree, "docs"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(tree, "w1", "task.txt"), []byte("w1-task"), 0o644)
	os.WriteFile(filepath.Join(outside, "task.txt"), []byte("outside-secret"), 0o644)
	os.WriteFile(filepath.Join(tree, "docs", "readme"), []byte("tree-docs"), 0o644)
	// A file in the guest's /tmp (here the host's): what a redirected destination shows.
	marker, err := os.CreateTemp("/tmp", "lvtmr-marker-")
	if err != nil {
		t.Fatal(err)
	}
	marker.WriteString("guest-tmp")
	marker.Close()
	t.Cleanup(func() { os.Remove(marker.Name()) })
	runDir := filepath.Join("/run/user", itoa(g.uid), "lever")
	for _, d := range []string{"tickets/worker-w1", "bench/worker-w1", "tickets/manager", "bench/manager"} {
		os.MkdirAll(filepath.Join(runDir, d), 0o700)
	}
	homes := filepath.Join(g.home, "levhome")
	os.MkdirAll(filepath.Join(homes, "worker-w1"), 0o700)
	os.MkdirAll(filepath.Join(homes, "manager"), 0o700)
	for _, d := range []string{tree, outside, homes, runDir} {
		chownR(t, d, g.uid)
	}
	cs, err := Plan(Params{
		Instance: "lvtmr", Image: im.Ref, BenchImage: im.Ref, Runtime: g.runtime,
		Workers: []WorkerSpec{{Name: "w1", Dir: "w1"}}, ReadOnly: []string{"docs"},
		TicketRoot: filepath.Join(runDir, "tickets"), TreeSource: tree, LevHomeRoot: homes, BenchRoot: filepath.Join(runDir, "bench"),
	})
	if err != nil {
		t.Fatal(err)
	}
	mgr, w1 := cs[0], cs[2]
	w1.Command = []string{"read:/lever/w1/task.txt"}
	w1.Rehash()
	mgr.Command = []string{"read:/lever/docs/readme", "write:/lever/docs/x"}
	mgr.Rehash()
	// The hook bring-up installs (bringup.checkMounts), with the mountcheck helper's
	// verdict run here as root, as it runs in the guest.
	check := func(ct Container, pid int) error {
		req := mountcheck.Request{Pid: pid, Tree: tree}
		for _, m := range ct.Mounts {
			if rel, ok := strings.CutPrefix(m.Source, tree+"/"); ok {
				req.Mounts = append(req.Mounts, mountcheck.Mount{Rel: rel, Dest: m.Dest, ReadOnly: m.ReadOnly})
			}
		}
		return mountcheck.Check(req)
	}
	// link swaps the tree's dir for a symlink to target; unlink puts the dir back.
	link := func(dir, target string) {
		t.Helper()
		if err := os.Rename(filepath.Join(tree, dir), filepath.Join(tree, dir+".real")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(tree, dir)); err != nil {
			t.Fatal(err)
		}
	}
	unlink := func(dir string) {
		t.Helper()
		if err := os.Remove(filepath.Join(tree, dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(tree, dir+".real"), filepath.Join(tree, dir)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		ct      Container
		dir     string // the tree's dir the manager swaps
		target  string // for a symlink to this ("" = left alone)
		swapped bool   // taken away again before the check
		payload string // a file the set-up container then shows, proving the swap took
		content string // its content
		want    string // "" = runs; else the refusal
		output  string // what a container that runs must print
	}{
		{"the worker's own dir", w1, "w1", "", false, "", "", "", `read /lever/w1/task.txt "w1-task" ok`},
		{"the worker's dir swapped for a symlink out", w1, "w1", outside, false, "/lever/w1/task.txt", "outside-secret",
			"w1 resolves to " + outside + " through a symlink", ""},
		{"swapped, and swapped back before the check", w1, "w1", outside, true, "/lever/w1/task.txt", "outside-secret",
			"the container's /lever/w1 is not the tree's " + tree + "/w1", ""},
		{"the manager's read-only docs", mgr, "docs", "", false, "", "", "", `read /lever/docs/readme "tree-docs" ok`},
		// The runtime resolves the destination too, inside the container: through the
		// writable tree, docs -> /tmp sends the guest's /tmp over the container's /tmp,
		// and with docs put back the container's /lever/docs is the tree's docs, writable
		// and unmounted, the same inode as the source.
		{"a nested mount's destination redirected, and put back", mgr, "docs", "/tmp", true, marker.Name(), "guest-tmp",
			"the container's /lever/docs is not a mount point", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.target != "" {
				link(c.dir, c.target)
			}
			hook := func(ct Container, pid int) error {
				if c.payload != "" {
					// Payload control: the runtime followed the symlink.
					b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "root", c.payload))
					if string(b) != c.content {
						t.Errorf("the initialised container's %s holds %q (%v), not %q: the attack did not reach the check", c.payload, b, err, c.content)
					}
				}
				if c.swapped {
					unlink(c.dir)
					// A check of the source alone would now pass.
					if r, err := filepath.EvalSymlinks(filepath.Join(tree, c.dir)); err != nil || r != filepath.Join(tree, c.dir) {
						t.Errorf("the swap back left %q, %v", r, err)
					}
				}
				return check(ct, pid)
			}
			ch, err := g.client.EnsureWith(c.ct, true, StartHooks{Mounted: hook})
			if c.target != "" && !c.swapped {
				unlink(c.dir)
			}
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if code, err := g.client.Wait(c.ct.Name); err != nil || code != 0 {
					t.Fatalf("exited %d: %v", code, err)
				}
				logs, _ := g.client.Logs(c.ct.Name)
				if !strings.Contains(logs, c.output) {
					t.Fatalf("%s: %s lacks %q", ch, logs, c.output)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "removed before anything in it ran") {
				t.Fatalf("got %s, %v; want a refusal holding %q", ch, err, c.want)
			}
			if st, err := g.client.Inspect(c.ct.Name); err != nil || st != nil {
				t.Fatalf("the refused container is still there: %+v, %v", st, err)
			}
		})
	}
}
