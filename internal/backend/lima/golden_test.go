package lima

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lima-vm/lima/pkg/limayaml"

	"github.com/lever-jail/lever/internal/config"
)

var updateGolden = flag.Bool("update", false, "rewrite the template goldens in testdata/golden")

// goldenConfig is fixed (no temp dirs) so the rendered text is reproducible. It carries
// the defaults config.Load would have filled (disk), which ParamsFor does not re-apply.
func goldenConfig() *config.Config {
	return &config.Config{
		Name: "t", Backend: "lima", Tree: "tree", Dir: "/home/alice/project", Disk: config.DefaultDisk,
		Lima: config.Lima{Image: "img/disk.qcow2", Kernel: "img/vmlinuz", Initrd: "img/initrd.img", CPUs: 2, Memory: "2GiB"},
	}
}

// validateFor runs Lima's own validator on a template rendered for host h. One of Lima's
// rules looks at the machine the validator runs on, not the template: vz requires the
// guest arch to be the running machine's. Where the test machine's arch differs from h's,
// exactly that error (and nothing else) is accepted; on h's own arch it must validate clean.
func validateFor(t *testing.T, h Host, b []byte) *limayaml.LimaYAML {
	t.Helper()
	y, err := Validate(b)
	if err == nil {
		return y
	}
	plat, _ := PlatformFor(h)
	if plat.VMType == "vz" && h.Arch != runtime.GOARCH {
		lines := strings.Split(strings.TrimPrefix(err.Error(), "lima template does not validate: "), "\n")
		if len(lines) == 1 && strings.HasPrefix(lines[0], "field `arch` must be ") && strings.HasSuffix(lines[0], "for VZ; got \""+plat.Arch+"\"") {
			// Validate stops before returning the filled config; fill it for the checks.
			var y limayaml.LimaYAML
			var none limayaml.LimaYAML
			if uerr := limayaml.Unmarshal(b, &y, "golden"); uerr != nil {
				t.Fatal(uerr)
			}
			limayaml.FillDefault(&y, &none, &none, filepath.Join(t.TempDir(), "lima.yaml"), false)
			return &y
		}
	}
	t.Fatalf("Lima's validator refuses the %s/%s template: %v", h.OS, h.Arch, err)
	return nil
}

var goldenHosts = []struct {
	file string
	host Host
	// what the rendered template must say
	vmType, arch, mountType string
}{
	{"darwin-vz-aarch64-virtiofs.yaml", Host{"darwin", "arm64", "14.5"}, "vz", "aarch64", "virtiofs"},
	{"darwin-qemu-x86_64-reverse-sshfs.yaml", Host{"darwin", "amd64", "12.7"}, "qemu", "x86_64", "reverse-sshfs"},
	{"linux-qemu-x86_64-reverse-sshfs.yaml", Host{"linux", "amd64", ""}, "qemu", "x86_64", "reverse-sshfs"},
	{"linux-qemu-aarch64-reverse-sshfs.yaml", Host{"linux", "arm64", ""}, "qemu", "aarch64", "reverse-sshfs"},
}

// Each host combination renders to its golden, validates with pkg/limayaml, passes the
// drift check against itself, and is refused by the drift check once a global override
// adds a mount, a port forward or containerd (positive control: the clean row passes).
func TestTemplateGoldens(t *testing.T) {
	for _, g := range goldenHosts {
		t.Run(g.file, func(t *testing.T) {
			plat, err := PlatformFor(g.host)
			if err != nil {
				t.Fatal(err)
			}
			p, err := ParamsFor(goldenConfig(), plat)
			if err != nil {
				t.Fatal(err)
			}
			b, err := renderOnly(p)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", g.file)
			if *updateGolden {
				os.MkdirAll(filepath.Dir(path), 0o755)
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if string(want) != string(b) {
				t.Fatalf("rendered template differs from %s (run with -update after reviewing):\n%s", path, b)
			}
			y := validateFor(t, g.host, b)
			if string(*y.VMType) != g.vmType || string(*y.Arch) != g.arch || *y.MountType != g.mountType {
				t.Fatalf("vmType %s arch %s mountType %s, want %s %s %s", *y.VMType, *y.Arch, *y.MountType, g.vmType, g.arch, g.mountType)
			}
			if len(y.Images) != 1 || y.Images[0].Arch != *y.Arch {
				t.Fatalf("images %+v: want one image of arch %s", y.Images, *y.Arch)
			}
			if y.CPUType[*y.Arch] == "" {
				t.Fatalf("cpuType %v has no entry for %s", y.CPUType, *y.Arch)
			}
			if g.mountType == "reverse-sshfs" {
				if s := y.Mounts[0].SSHFS; s.Cache == nil || *s.Cache || s.FollowSymlinks == nil || *s.FollowSymlinks {
					t.Fatalf("sshfs = %+v, want cache and followSymlinks off", s)
				}
			}
			in := IntentOf(p, y)
			for _, row := range []struct {
				name   string
				mutate func(r *Realized)
				want   string
			}{
				{"clean", func(*Realized) {}, ""},
				{"extra mount", func(r *Realized) {
					r.Mounts = append(r.Mounts, limayaml.Mount{Location: "/Users/alice", MountPoint: ptr("/mnt/home"), Writable: ptr(false)})
				}, "mounts[1]: /Users/alice at /mnt/home (writable=false) is not in the template"},
				{"extra port forward", func(r *Realized) {
					r.PortForwards = append(r.PortForwards, limayaml.PortForward{GuestSocket: "/run/podman.sock", HostSocket: "/tmp/p.sock"})
				}, "portForwards[2]"},
				{"containerd", func(r *Realized) { r.Containerd.User = ptr(true) }, "containerd.user: true"},
				{"mount type changed", func(r *Realized) { r.MountType = ptr("9p") }, `mountType: "9p", template asks for "` + g.mountType + `"`},
			} {
				r := realizedOf(y)
				// Copy the slices the rows append to, so rows do not share backing arrays.
				r.Mounts = append([]limayaml.Mount(nil), r.Mounts...)
				r.PortForwards = append([]limayaml.PortForward(nil), r.PortForwards...)
				row.mutate(&r)
				d := Drift(in, r)
				if row.want == "" {
					if len(d) != 0 {
						t.Errorf("%s: template drifts from itself: %q", row.name, d)
					}
					continue
				}
				if len(d) != 1 || !strings.Contains(d[0], row.want) {
					t.Errorf("%s: drift %q, want exactly one naming %q", row.name, d, row.want)
				}
			}
		})
	}
}
