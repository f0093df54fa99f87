//go:build e2e

package jail

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
	chownR(t, filepath.Join("/run/user", itoa(g.uid), "lever"), g.uid)

	cs, err := Plan(Params{
		Instance: "lvtbj", Image: im.Ref, Runtime: g.runtime,
		Workers:    []WorkerSpec{{Name: "w1", Dir: "w1"}},
		TicketRoot: tickets, TreeSource: tree,
	})
	if err != nil {
		t.Fatal(err)
	}
	mgr, w1 := cs[0], cs[1]
	mgr.Command = []string{"ls:/lever", "read:/lever/manager-secret.txt", "write:/lever/m.out", "ls:/run/lever"}
	w1.Command = []string{"ls:/lever", "ls:/lever/w1", "read:/lever/manager-secret.txt", "read:/run/lever/ticket",
		"read:/run/user/" + itoa(g.uid) + "/lever/tickets/worker-w2/ticket", "write:/run/lever/forged", "write:/lever/w1/out"}
	for _, c := range []Container{mgr, w1} {
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
	for _, c := range []Container{mgr, w1} {
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(logs[tc.container], tc.want) {
				t.Errorf("%s output lacks %q", tc.container, tc.want)
			}
		})
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
	if err != nil || len(list) != 2 {
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
