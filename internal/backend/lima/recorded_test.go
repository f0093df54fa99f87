package lima

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/config"
)

// The drift check on `limactl list --json` output recorded from the real Lima v1.2.2 VM of
// the e2e test (user and paths renamed to lvtl): a fresh VM is clean, and each global
// override.yaml that widened it is named, and nothing else is.
func TestDriftOnRecordedLimactlList(t *testing.T) {
	cfg := &config.Config{Name: "lvtl", Backend: "lima", TreePath: "/home/lvtl/proj/tree", Dir: "/home/lvtl/proj",
		Lima: config.Lima{Image: "/i/disk.qcow2", Kernel: "/i/vmlinuz", Initrd: "/i/initrd.img"}}
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
	in := IntentOf(p, y)
	cases := []struct {
		file string
		want []string
	}{
		{"list-fresh.json", nil},
		{"list-override-mount.json", []string{"mounts[1]: /home/lvtl/extra at /extra (writable=false) is not in the template"}},
		{"list-override-portforward.json", []string{
			`portForwards[0]: {"guestIP":"127.0.0.1","guestPort":8080,"guestPortRange":[8080,8080],"hostIP":"127.0.0.1","hostPort":18080,"hostPortRange":[18080,18080],"proto":"tcp"} is not in the template`,
			"portForwards[1]: the template's rule 0 is displaced (a rule before it would match first)",
			"portForwards[2]: the template's rule 1 is displaced (a rule before it would match first)",
		}},
		{"list-override-containerd.json", []string{"containerd.user: true, template asks for false"}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			inst, err := ParseList(raw, "lever-lvtl")
			if err != nil || inst == nil {
				t.Fatalf("ParseList: %v %v", inst, err)
			}
			if inst.Status != "Running" || inst.Dir != "/home/lvtl/.lima/lever-lvtl" {
				t.Errorf("instance = %s %s", inst.Status, inst.Dir)
			}
			if diff := cmp.Diff(c.want, Drift(in, inst.Config)); diff != "" {
				t.Errorf("Drift (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseListMissingAndBroken(t *testing.T) {
	raw, err := os.ReadFile("testdata/list-fresh.json")
	if err != nil {
		t.Fatal(err)
	}
	if inst, err := ParseList(raw, "lever-other"); inst != nil || err != nil {
		t.Errorf("another VM's name: %v %v, want nil, nil", inst, err)
	}
	if inst, err := ParseList(nil, "lever-lvtl"); inst != nil || err != nil {
		t.Errorf("no VMs: %v %v, want nil, nil", inst, err)
	}
	if _, err := ParseList([]byte(`{"name":"lever-lvtl","config":{"mounts":"x"}}`), "lever-lvtl"); err == nil {
		t.Error("a malformed config parsed without error")
	}
}
