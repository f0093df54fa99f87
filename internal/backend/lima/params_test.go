package lima

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

// TestParamsTakeConfigsDefaults: the VM's size comes from lever.yaml through config, whose
// defaults are the only ones (config.Default*). A file that leaves cpus, memory and disk
// unset renders config's defaults; a file that sets them renders what it set (the control:
// the values really flow from the file); and ParamsFor re-applies nothing to a config that
// did not come through config.Load.
func TestParamsTakeConfigsDefaults(t *testing.T) {
	plat, err := PlatformFor(Host{OS: "linux", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name             string
		lima             string // lever.yaml's lima section, after image
		cpus             int
		memory, disk     string
		skipConfigLoader bool
	}{
		{name: "unset: config's defaults", cpus: config.DefaultLimaCPUs, memory: config.DefaultLimaMem, disk: config.DefaultDisk},
		{name: "set: the file's values", lima: "  cpus: 3\n  memory: 3GiB\ndisk: 30GiB\n", cpus: 3, memory: "3GiB", disk: "30GiB"},
		{name: "not loaded by config: nothing re-applied", skipConfigLoader: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("HOME", t.TempDir())
			t.Setenv("LEVER_STATE_DIR", filepath.Join(t.TempDir(), "state"))
			os.MkdirAll(filepath.Join(dir, "tree"), 0o755)
			os.WriteFile(filepath.Join(dir, "key"), []byte("k"), 0o600)
			os.WriteFile(filepath.Join(dir, "disk.qcow2"), nil, 0o644)
			var cfg *config.Config
			if tc.skipConfigLoader {
				cfg = &config.Config{Name: "t", Backend: "lima", Tree: "tree", Dir: dir, Lima: config.Lima{Image: "disk.qcow2"}}
			} else {
				body := "name: t\nbackend: lima\ntree: tree\nbroker:\n  api_key_file: key\nlima:\n  image: disk.qcow2\n" + tc.lima
				if cfg, err = config.Parse(filepath.Join(dir, "lever.yaml"), []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
			p, err := ParamsFor(cfg, plat)
			if err != nil {
				t.Fatal(err)
			}
			if p.CPUs != tc.cpus || p.Memory != tc.memory || p.Disk != tc.disk {
				t.Errorf("params cpus %d memory %q disk %q, want %d %q %q", p.CPUs, p.Memory, p.Disk, tc.cpus, tc.memory, tc.disk)
			}
		})
	}
}
