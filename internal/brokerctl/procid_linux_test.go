//go:build linux

package brokerctl

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// The Linux seam on real processes: this test process is read back with its own argv (the
// positive control), and a child that has exited but is not yet reaped (a zombie, whose
// pid is still taken) is reported gone.
func TestProcIdentityLinux(t *testing.T) {
	ticks, argv, err := procIdentity(os.Getpid())
	if err != nil || ticks == 0 || !slices.Equal(argv, os.Args) {
		t.Fatalf("self: %d %q %v, want argv %q", ticks, argv, err, os.Args)
	}
	cmd := exec.Command("/bin/sh", "-c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, _, err = procIdentity(cmd.Process.Pid)
		if errors.Is(err, errExited) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exited child still reported as %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
