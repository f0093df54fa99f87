package lima

import (
	"context"
	"testing"

	"github.com/lima-vm/lima/pkg/limayaml"
)

func TestPlatformFor(t *testing.T) {
	for _, tc := range []struct {
		h    Host
		want Platform
		err  string
	}{
		{Host{"darwin", "arm64", "14.5"}, Platform{"vz", "aarch64", "virtiofs", "virtiofs", "hvc0", ""}, ""},
		{Host{"darwin", "arm64", "13.0"}, Platform{"vz", "aarch64", "virtiofs", "virtiofs", "hvc0", ""}, ""},
		{Host{"darwin", "amd64", "13.6.1"}, Platform{"vz", "x86_64", "virtiofs", "virtiofs", "hvc0", ""}, ""},
		{Host{"darwin", "amd64", "12.7"}, Platform{"qemu", "x86_64", "reverse-sshfs", "fuse.sshfs", "ttyS0", "qemu-system-x86_64"}, ""},
		{Host{"darwin", "arm64", "12.6"}, Platform{"qemu", "aarch64", "reverse-sshfs", "fuse.sshfs", "ttyAMA0", "qemu-system-aarch64"}, ""},
		// Unknown version: qemu (a wrong vz would fail at start).
		{Host{"darwin", "arm64", ""}, Platform{"qemu", "aarch64", "reverse-sshfs", "fuse.sshfs", "ttyAMA0", "qemu-system-aarch64"}, ""},
		// A Linux host never gets vz, whatever version string it carries.
		{Host{"linux", "amd64", "14.0"}, Platform{"qemu", "x86_64", "reverse-sshfs", "fuse.sshfs", "ttyS0", "qemu-system-x86_64"}, ""},
		{Host{"linux", "arm64", ""}, Platform{"qemu", "aarch64", "reverse-sshfs", "fuse.sshfs", "ttyAMA0", "qemu-system-aarch64"}, ""},
		{Host{"linux", "riscv64", ""}, Platform{}, `lima backend: host architecture "riscv64" is not supported (arm64 or amd64)`},
		{Host{"windows", "amd64", ""}, Platform{}, `lima backend: host OS "windows" is not supported (darwin or linux)`},
	} {
		got, err := PlatformFor(tc.h)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%+v: err %v, want %q", tc.h, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: got %+v %v, want %+v", tc.h, got, err, tc.want)
		}
	}
}

func TestMacOSMajor(t *testing.T) {
	for in, want := range map[string]int{"13.0": 13, "14.5\n": 14, "26": 26, "12.7.6": 12, "": 0, "x.1": 0, "-13": 0} {
		if got := macOSMajor(in); got != want {
			t.Errorf("macOSMajor(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestGuestArchIsTheTemplates: the architecture Lima reports for picking lev is the one
// its rendered template gives the VM, for every host lever supports.
func TestGuestArchIsTheTemplates(t *testing.T) {
	for _, h := range []Host{{"darwin", "arm64", "14.5"}, {"darwin", "amd64", "12.7"}, {"linux", "amd64", ""}, {"linux", "arm64", ""}} {
		plat, err := PlatformFor(h)
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
		var y limayaml.LimaYAML
		if err := limayaml.Unmarshal(b, &y, "test"); err != nil || y.Arch == nil {
			t.Fatalf("%+v: %v", h, err)
		}
		fromYAML, err := Platform{Arch: string(*y.Arch)}.GOARCH()
		got, gerr := (&Lima{plat: plat}).GuestArch(context.Background())
		if err != nil || gerr != nil || got != fromYAML || got != h.Arch {
			t.Errorf("%+v: GuestArch %q (%v), template arch %s -> %q (%v), want %s", h, got, gerr, *y.Arch, fromYAML, err, h.Arch)
		}
	}
	if _, err := (Platform{Arch: "riscv64"}).GOARCH(); err == nil {
		t.Error("an architecture lever ships no lev for was accepted")
	}
}
