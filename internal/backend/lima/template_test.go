package lima

import (
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	dir := t.TempDir()
	return &config.Config{
		Name: "t", Backend: "lima", Tree: "tree", Dir: dir,
		Lima: config.Lima{Image: "img/disk.qcow2", Kernel: "img/vmlinuz", Initrd: "img/initrd.img", CPUs: 2, Memory: "2GiB"},
	}
}

func TestRenderValidatesAndAsksForExactlyTheContainment(t *testing.T) {
	cfg := testConfig(t)
	p, err := ParamsFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(p)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	y, err := Validate(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(y.Mounts) != 1 || y.Mounts[0].Location != cfg.Dir+"/tree" || *y.Mounts[0].MountPoint != "/lever" || !*y.Mounts[0].Writable {
		t.Fatalf("mounts = %+v, want only the tree writable at /lever", y.Mounts)
	}
	if *y.Containerd.System || *y.Containerd.User {
		t.Fatalf("containerd = %+v, want off", y.Containerd)
	}
	for _, pf := range y.PortForwards {
		if !pf.Ignore {
			t.Fatalf("port forward %+v is not ignore", pf)
		}
	}
	if *y.PropagateProxyEnv {
		t.Fatal("host proxy variables would be copied into the guest")
	}
	if *y.Plain {
		t.Fatal("plain mode would drop the mount")
	}
	if d := Drift(IntentOf(p, y), realizedOf(y)); len(d) != 0 {
		t.Fatalf("template drifts from itself: %v", d)
	}
	t.Logf("%s", b)
}

// A value that tries to break out of its YAML field stays a string.
func TestRenderQuotesHostileValues(t *testing.T) {
	cfg := testConfig(t)
	cfg.Tree = "tree\nmounts:\n- location: /\n  writable: true"
	p, err := ParamsFrom(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Render(p)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	y, err := Validate(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(y.Mounts) != 1 || !strings.HasSuffix(y.Mounts[0].Location, "writable: true") {
		t.Fatalf("hostile tree escaped its field: %+v", y.Mounts)
	}
}
