package testutil

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// LockVM serialises the tests that boot a VM across test binaries: go test runs packages
// in parallel, and two qemu guests under TCG on a 2-core machine slow each other past the
// timings the tests hold them to (a REJECT that must answer "at once"). The lock is
// released when the test ends.
func LockVM(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/tmp/lever-e2e-vm.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("opening the VM test lock: %v", err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("taking the VM test lock: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %.0fs for another VM test to finish", d.Seconds())
	}
	t.Cleanup(func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
