//go:build e2e

package containers

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/levimage"
)

// TestHardenedLevContainer builds the lev image from a static binary (a probe standing in
// for lev), loads it into a real rootless podman through the bindings, runs it with lever's
// hardening, and has it attack that hardening from inside.
func TestHardenedLevContainer(t *testing.T) {
	g := newTestGuest(t)
	probe := buildProbe(t)
	im, err := levimage.Build(levimage.Spec{LevBinary: probe})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := g.client.ImageExists(im.Ref); ok {
		t.Fatalf("fresh run user already has %s", im.Ref)
	}
	if _, err := g.client.LoadArchive(im.Archive); err != nil {
		t.Fatal(err)
	}
	if ok, err := g.client.ImageExists(im.Ref); !ok || err != nil {
		t.Fatalf("image %s not present after load: %v", im.Ref, err)
	}

	// The tree lives where the guest mounts it; here a directory owned by the run user.
	// (t.TempDir's parents are root-only; the run user's rootless podman must reach it.)
	tree := filepath.Join(g.home, "tree")
	os.MkdirAll(tree, 0o755)
	os.MkdirAll(filepath.Join(tree, "w1"), 0o755)
	os.WriteFile(filepath.Join(tree, "manager-secret.txt"), []byte("manager-only"), 0o644)
	os.WriteFile(filepath.Join(tree, "w1", "task.txt"), []byte("w1-task"), 0o644)
	chownR(t, tree, g.uid)
	tickets := filepath.Join("/run/user", itoa(g.uid), "lever", "tickets")
	for _, w := range []string{"worker-w1", "worker-w2", "manager"} {
		os.MkdirAll(filepath.Join(tickets, w), 0o700)
		os.WriteFile(filepath.Join(tickets, w, "ticket"), []byte("ticket-"+w), 0o600)
	}
	// Each agent's lev home and bench dir, as the enrol step leaves them.
	homes := filepath.Join(g.home, "levhome")
	benches := filepath.Join("/run/user", itoa(g.uid), "lever", "bench")
	for _, a := range []string{"manager", "worker-w1"} {
		os.MkdirAll(filepath.Join(homes, a), 0o700)
		os.WriteFile(filepath.Join(homes, a, "state"), []byte("lev-state-"+a), 0o600)
		os.MkdirAll(filepath.Join(benches, a), 0o700)
	}
	chownR(t, homes, g.uid)
	chownR(t, filepath.Join("/run/user", itoa(g.uid), "lever"), g.uid)

	cs, err := Plan(Params{
		Instance: "lvtbj", Image: im.Ref, BenchImage: im.Ref, Runtime: g.runtime,
		Workers:    []WorkerSpec{{Name: "w1", Dir: "w1"}},
		TicketRoot: tickets, TreeSource: tree, LevHomeRoot: homes, BenchRoot: benches,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 4 {
		t.Fatalf("%d containers, want 4", len(cs))
	}
	mgr, mb, w1, wb := cs[0], cs[1], cs[2], cs[3]
	mgr.Command = []string{"ls:/lever", "read:/lever/manager-secret.txt", "write:/lever/m.out", "ls:/run/lever",
		"read:/var/lib/lev/state", "find:ticket-manager"}
	w1.Command = []string{"ls:/lever", "ls:/lever/w1", "read:/lever/manager-secret.txt", "read:/run/lever/ticket",
		"read:/run/user/" + itoa(g.uid) + "/lever/tickets/worker-w2/ticket", "write:/run/lever/forged", "write:/lever/w1/out"}
	// The workbenches: the probe stands in for `lev bench serve` (the entrypoint stays
	// /lev; only its arguments change) and attacks lev's files from the bench's side.
	mb.Command = []string{"ls:/lever", "write:/lever/bench.out", "ls:/run/lever", "ls:/var/lib/lev", "read:/run/lever/ticket",
		"ls:/run/lever-bench", "write:/run/lever-bench/sock", "write:/tmp/scratch", "env", "find:ticket-manager", "find:lev-state-manager"}
	wb.Command = []string{"ls:/lever", "read:/lever/manager-secret.txt", "ls:/run/lever", "ls:/var/lib/lev",
		"write:/lever/w1/bench.out", "write:/tmp/scratch", "write:/etc/scratch", "find:ticket-worker-w1", "find:lev-state-worker-w1", "env"}
	for _, c := range []Container{mgr, w1, mb, wb} {
		c.Rehash()
		ch, err := g.client.Ensure(c, false)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if ch != Created {
			t.Fatalf("%s: %s, want created", c.Name, ch)
		}
		if code, err := g.client.Wait(c.Name); err != nil || code != 0 {
			t.Fatalf("%s exited %d: %v", c.Name, code, err)
		}
	}
	logs := map[string]string{}
	for _, c := range []Container{mgr, w1, mb, wb} {
		l, err := g.client.Logs(c.Name)
		if err != nil {
			t.Fatal(err)
		}
		logs[c.Name] = l
		t.Logf("%s:\n%s", c.Name, l)
	}

	cases := []struct {
		name, container, want string
	}{
		{"manager: no effective capabilities", mgr.Name, "status CapEff: 0000000000000000"},
		{"manager: no bounding capabilities", mgr.Name, "status CapBnd: 0000000000000000"},
		{"manager: no_new_privs set", mgr.Name, "status NoNewPrivs: 1"},
		{"manager: mount refused", mgr.Name, "mount refused("},
		{"manager: setuid(0) refused", mgr.Name, "setuid0 refused("},
		{"manager: read-only root", mgr.Name, "write-root refused("},
		{"manager: sees the whole tree", mgr.Name, "ls /lever [manager-secret.txt,w1] ok"},
		{"manager: tree writable", mgr.Name, "write /lever/m.out ok"},
		{"worker: no effective capabilities", w1.Name, "status CapEff: 0000000000000000"},
		{"worker: no_new_privs set", w1.Name, "status NoNewPrivs: 1"},
		{"worker: sees only its own dir", w1.Name, "ls /lever [w1] ok"},
		{"worker: cannot read the manager's file", w1.Name, "read /lever/manager-secret.txt \"\" refused("},
		{"worker: reads its own ticket", w1.Name, "read /run/lever/ticket \"ticket-worker-w1\" ok"},
		{"worker: cannot reach another worker's ticket", w1.Name, "refused(open /run/user/"},
		{"worker: ticket dir read-only", w1.Name, "write /run/lever/forged refused("},
		{"worker: own dir writable", w1.Name, "write /lever/w1/out ok"},
		// positive controls for the bench's searches: lev's container holds both
		{"manager lev: reads its home", mgr.Name, "read /var/lib/lev/state \"lev-state-manager\" ok"},
		{"manager lev: the token search finds the ticket", mgr.Name, "find hits=1,/run/lever/ticket"},
		{"manager bench: hardened alike", mb.Name, "status CapEff: 0000000000000000"},
		{"manager bench: no_new_privs", mb.Name, "status NoNewPrivs: 1"},
		{"manager bench: read-only root", mb.Name, "write-root refused("},
		{"manager bench: sees the tree", mb.Name, "manager-secret.txt,w1] ok"},
		{"manager bench: tree writable", mb.Name, "write /lever/bench.out ok"},
		// the lev image has an empty /run/lever mount point; a workbench image may have none
		{"manager bench: no enrolment dir", mb.Name, "ls /run/lever [] "},
		{"manager bench: no lev home", mb.Name, "ls /var/lib/lev [] refused("},
		{"manager bench: no ticket", mb.Name, "read /run/lever/ticket \"\" refused("},
		{"manager bench: its exec-channel dir", mb.Name, "write /run/lever-bench/sock ok"},
		{"manager bench: ticket bytes nowhere", mb.Name, "find hits=0\n"},
		{"worker bench: only its dir", wb.Name, "ls /lever [w1] ok"},
		{"worker bench: not the manager's file", wb.Name, "read /lever/manager-secret.txt \"\" refused("},
		{"worker bench: no enrolment dir", wb.Name, "ls /run/lever [] "},
		{"worker bench: no lev home", wb.Name, "ls /var/lib/lev [] refused("},
		{"worker bench: own dir writable", wb.Name, "write /lever/w1/bench.out ok"},
		// /tmp (HOME) is a writable tmpfs on the read-only root; the root beside it stays
		// read-only (the control that the write reached a filesystem that refuses)
		{"manager bench: /tmp writable", mb.Name, "write /tmp/scratch ok"},
		{"worker bench: /tmp writable", wb.Name, "write /tmp/scratch ok"},
		{"worker bench: /etc still read-only", wb.Name, "write /etc/scratch refused("},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(logs[tc.container], tc.want) {
				t.Errorf("%s output lacks %q", tc.container, tc.want)
			}
		})
	}

	for _, b := range []Container{mb, wb} {
		// every search in a bench comes back empty; no LEV_ variable reaches it
		if strings.Count(logs[b.Name], "find hits=0\n") != 2 {
			t.Errorf("%s: a lev secret is readable in the bench:\n%s", b.Name, logs[b.Name])
		}
		for _, l := range strings.Split(logs[b.Name], "\n") {
			if strings.HasPrefix(l, "env ") && (strings.Contains(l, "LEV_") || !strings.Contains(l, "HOME=/tmp")) {
				t.Errorf("%s env: %s", b.Name, l)
			}
		}
	}

	// Running as the run user's own uid (keep-id), not container root.
	if !strings.Contains(logs[mgr.Name], "uid "+itoa(g.uid)) {
		t.Errorf("manager does not run as the run user's uid %d", g.uid)
	}

	// Idempotence: the same plan on a stopped container only starts it; a changed plan
	// replaces it.
	if ch, err := g.client.Ensure(mgr, false); err != nil || ch != Started {
		t.Errorf("second Ensure: %s %v, want started", ch, err)
	}
	st, err := g.client.Inspect(mgr.Name)
	if err != nil || st == nil {
		t.Fatalf("inspect: %v", err)
	}
	if len(st.EffCaps) != 0 || len(st.CapAdd) != 0 {
		t.Errorf("inspect shows capabilities: eff=%v add=%v", st.EffCaps, st.CapAdd)
	}
	if st.Network != "host" {
		t.Errorf("network mode %q, want host (the jail's namespace)", st.Network)
	}
	list, err := g.client.List("lvtbj")
	if err != nil || len(list) != 4 {
		t.Errorf("List: %d containers, %v", len(list), err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func chownR(t *testing.T, root string, uid int) {
	t.Helper()
	filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			os.Lchown(p, uid, uid)
		}
		return nil
	})
}
