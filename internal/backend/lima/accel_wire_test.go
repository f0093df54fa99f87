package lima

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

// The decision reaches limactl: under TCG the qemu variable for the host's architecture
// points at lever's wrapper (written into the state dir) and auto's warning is printed
// once, before limactl runs; under KVM neither happens (positive control for the env
// check); a kvm that cannot work stops EnsureUp before limactl runs at all.
func TestAccelReachesLimactl(t *testing.T) {
	oldEuid, oldAccel, oldWarn := geteuid, hostAccel, accelWarn
	t.Cleanup(func() { geteuid, hostAccel, accelWarn = oldEuid, oldAccel, oldWarn })
	geteuid = func() int { return 1000 }
	arch := map[string]string{"amd64": "X86_64", "arm64": "AARCH64"}[runtime.GOARCH]
	if arch == "" {
		t.Skipf("no lima platform for %s", runtime.GOARCH)
	}
	for _, tc := range []struct {
		name     string
		accel    Accel
		err      error
		wantEnv  bool
		wantWarn int
		wantRun  bool
		wantErr  string
	}{
		{"auto fell back to tcg", Accel{Name: "tcg", Why: "x", Warning: "warning: lima.accel auto: using TCG because x"}, nil, true, 1, true, "limactl 1.1.1 is not supported"},
		{"explicit tcg", Accel{Name: "tcg", Why: "lima.accel is tcg"}, nil, true, 0, true, "limactl 1.1.1 is not supported"},
		{"kvm usable", Accel{Name: "kvm", Why: "opens"}, nil, false, 0, true, "limactl 1.1.1 is not supported"},
		{"kvm unusable", Accel{}, &kvmUnusableError{"lima.accel is kvm but /dev/kvm is mode 0600 root:root and user alice (uid 1000) cannot open it"}, false, 0, false,
			"lima.accel is kvm but /dev/kvm is mode 0600 root:root and user alice (uid 1000)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			envLog := filepath.Join(dir, "env")
			bin := filepath.Join(dir, "limactl")
			os.WriteFile(bin, []byte("#!/bin/sh\nenv >"+envLog+"\necho limactl version 1.1.1\n"), 0o755)
			t.Setenv("LIMA_HOME", filepath.Join(dir, "lima"))
			t.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
			t.Setenv("LEVER_QEMU_SYSTEM", "")
			hostAccel = func(string) (Accel, error) { return tc.accel, tc.err }
			var warnings []string
			accelWarn = func(l string) { warnings = append(warnings, l) }
			cfg := &config.Config{Name: "acc", Backend: "lima", TreePath: dir, Dir: dir,
				Lima: config.Lima{Image: "/i/disk.qcow2", Limactl: bin, Accel: "auto"}}
			l, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = l.EnsureUp(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("EnsureUp: %v, want %q", err, tc.wantErr)
			}
			if len(warnings) != tc.wantWarn {
				t.Errorf("warnings %q, want %d", warnings, tc.wantWarn)
			}
			env, rerr := os.ReadFile(envLog)
			if (rerr == nil) != tc.wantRun {
				t.Fatalf("limactl ran: %t, want %t", rerr == nil, tc.wantRun)
			}
			wrapper := "QEMU_SYSTEM_" + arch + "=" + l.qemuWrapper()
			if got := strings.Contains(string(env), wrapper+"\n"); got != tc.wantEnv {
				t.Errorf("limactl env has %s: %t, want %t", wrapper, got, tc.wantEnv)
			}
			if tc.wantEnv && !regexp.MustCompile(`(?m)^LEVER_QEMU_SYSTEM=(\S*/)?qemu-system-`+strings.ToLower(arch)+`$`).Match(env) {
				t.Errorf("limactl env lacks LEVER_QEMU_SYSTEM for the real qemu")
			}
		})
	}
}
