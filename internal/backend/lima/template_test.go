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
	if s := y.Mounts[0].SSHFS; s.Cache == nil || *s.Cache || s.FollowSymlinks == nil || *s.FollowSymlinks {
		t.Fatalf("sshfs = %+v, want cache and followSymlinks off", s)
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

// nested_virt decides whether the guest may have /dev/kvm: off, the kvm modules are
// blacklisted on the kernel command line; on, the guest gets the host CPU model.
func TestRenderNestedVirt(t *testing.T) {
	for _, nested := range []bool{false, true} {
		cfg := testConfig(t)
		cfg.NestedVirt = nested
		p, err := ParamsFrom(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Render(p)
		if err != nil {
			t.Fatal(err)
		}
		y, err := Validate(b)
		if err != nil {
			t.Fatal(err)
		}
		cmdline := y.Images[0].Kernel.Cmdline
		blacklisted := strings.Contains(cmdline, "modprobe.blacklist=kvm,kvm_amd,kvm_intel")
		cpu := y.CPUType["x86_64"]
		if blacklisted == nested || (nested && cpu != "host") || (!nested && cpu != "max") {
			t.Errorf("nested_virt=%t: cmdline %q, cpuType %q", nested, cmdline, cpu)
		}
		if l := (&Lima{cfg: cfg}).ManagerDevices(); (len(l) == 1 && l[0] == "/dev/kvm") != nested {
			t.Errorf("nested_virt=%t: manager devices %v", nested, l)
		}
	}
}
