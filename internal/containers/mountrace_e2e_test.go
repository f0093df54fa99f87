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
// holds the outside directory's file (the runtime did follow the symlink). The control
// is the untouched dir, which passes and whose container runs and reads the worker's file.
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
	for _, d := range []string{filepath.Join(tree, "w1"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(tree, "w1", "task.txt"), []byte("w1-task"), 0o644)
	os.WriteFile(filepath.Join(outside, "task.txt"), []byte("outside-secret"), 0o644)
	runDir := filepath.Join("/run/user", itoa(g.uid), "lever")
	for _, d := range []string{"tickets/worker-w1", "bench/worker-w1"} {
		os.MkdirAll(filepath.Join(runDir, d), 0o700)
	}
	homes := filepath.Join(g.home, "levhome")
	os.MkdirAll(filepath.Join(homes, "worker-w1"), 0o700)
	for _, d := range []string{tree, outside, homes, runDir} {
		chownR(t, d, g.uid)
	}
	cs, err := Plan(Params{
		Instance: "lvtmr", Image: im.Ref, BenchImage: im.Ref, Runtime: g.runtime,
		Workers:    []WorkerSpec{{Name: "w1", Dir: "w1"}},
		TicketRoot: filepath.Join(runDir, "tickets"), TreeSource: tree, LevHomeRoot: homes, BenchRoot: filepath.Join(runDir, "bench"),
	})
	if err != nil {
		t.Fatal(err)
	}
	w1 := cs[2]
	w1.Command = []string{"read:/lever/w1/task.txt"}
	w1.Rehash()
	// The hook bring-up installs (bringup.checkMounts), with the mountcheck helper's
	// verdict run here as root, as it runs in the guest.
	check := func(ct Container, pid int) error {
		req := mountcheck.Request{Pid: pid, Tree: tree}
		for _, m := range ct.Mounts {
			if rel, ok := strings.CutPrefix(m.Source, tree+"/"); ok {
				req.Mounts = append(req.Mounts, mountcheck.Mount{Rel: rel, Dest: m.Dest})
			}
		}
		return mountcheck.Check(req)
	}
	real := filepath.Join(tree, "w1.real")
	link := func() {
		t.Helper()
		if err := os.Rename(filepath.Join(tree, "w1"), real); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(tree, "w1")); err != nil {
			t.Fatal(err)
		}
	}
	unlink := func() {
		t.Helper()
		if err := os.Remove(filepath.Join(tree, "w1")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(real, filepath.Join(tree, "w1")); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		plant   bool   // the symlink is in place when the runtime mounts
		swapped bool   // and taken away again before the check
		want    string // "" = runs
	}{
		{"the worker's own dir", false, false, ""},
		{"the dir swapped for a symlink out", true, false, "w1 resolves to " + outside + " through a symlink"},
		{"swapped, and swapped back before the check", true, true, "the container's /lever/w1 is not the tree's " + tree + "/w1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.plant {
				link()
			}
			hook := func(ct Container, pid int) error {
				if c.plant {
					// Payload control: the runtime followed the symlink.
					b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "root", "lever", "w1", "task.txt"))
					if string(b) != "outside-secret" {
						t.Errorf("the initialised container's /lever/w1 does not hold the outside dir (%q, %v): the attack did not reach the check", b, err)
					}
				}
				if c.swapped {
					unlink()
					// A check of the source alone would now pass.
					if r, err := filepath.EvalSymlinks(filepath.Join(tree, "w1")); err != nil || r != filepath.Join(tree, "w1") {
						t.Errorf("the swap back left %q, %v", r, err)
					}
				}
				return check(ct, pid)
			}
			ch, err := g.client.EnsureWith(w1, true, StartHooks{Mounted: hook})
			if c.plant && !c.swapped {
				unlink()
			}
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if code, err := g.client.Wait(w1.Name); err != nil || code != 0 {
					t.Fatalf("exited %d: %v", code, err)
				}
				logs, _ := g.client.Logs(w1.Name)
				if !strings.Contains(logs, `read /lever/w1/task.txt "w1-task" ok`) {
					t.Fatalf("the worker did not read its own dir (%s): %s", ch, logs)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "removed before anything in it ran") {
				t.Fatalf("got %s, %v; want a refusal holding %q", ch, err, c.want)
			}
			if st, err := g.client.Inspect(w1.Name); err != nil || st != nil {
				t.Fatalf("the refused container is still there: %+v, %v", st, err)
			}
		})
	}
}
