//go:build e2e

package enrol

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lever-jail/lever/internal/guestside/runas"
	"github.com/lever-jail/lever/internal/testutil"
)

// TestEnrolHelperShedsRoot attacks the enrolment helper's file writes: a symlink planted
// by the run user in its agent dir must not let root's helper overwrite a root file.
func TestEnrolHelperShedsRoot(t *testing.T) {
	if os.Getenv("LVTB_BECOME") != "" {
		// Child: become the user, then try what a planted symlink would make root do.
		uid, _ := strconv.Atoi(os.Getenv("LVTB_BECOME"))
		if err := runas.Become(uid); err != nil {
			os.Exit(3)
		}
		if err := writeFileAtomic(os.Getenv("LVTB_TARGET"), []byte("pwned")); err == nil {
			os.Exit(4) // wrote into a root-owned dir: still privileged
		}
		os.Exit(0)
	}
	testutil.RequireRoot(t)
	const u = "lvtbenrol"
	exec.Command("userdel", "--remove", u).Run()
	if out, err := exec.Command("useradd", "--user-group", u).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", "--remove", u).Run() })
	out, err := exec.Command("id", "-u", u).Output()
	if err != nil {
		t.Fatal(err)
	}
	uid := string(out[:len(out)-1])

	// A root-owned file the run user may not touch, and its agent dir with a planted link.
	rootDir := t.TempDir()
	victim := filepath.Join(rootDir, "victim")
	if err := os.WriteFile(victim, []byte("intact"), 0o644); err != nil {
		t.Fatal(err)
	}
	agentDir := t.TempDir()
	os.Chmod(filepath.Dir(agentDir), 0o755)
	n, _ := strconv.Atoi(uid)
	os.Chown(agentDir, n, n)
	link := filepath.Join(agentDir, "client.key")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}

	// As root, the atomic write replaces the planted link and leaves its target alone.
	if err := writeFileAtomic(link, []byte("key")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "intact" {
		t.Fatalf("planted symlink redirected the write: victim now %q", b)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink != 0 {
		t.Fatalf("planted symlink still in place")
	}

	// After runas.Become the helper cannot write where only root can.
	cmd := exec.Command(os.Args[0], "-test.run", "^TestEnrolHelperShedsRoot$")
	cmd.Env = append(os.Environ(), "LVTB_BECOME="+uid, "LVTB_TARGET="+filepath.Join(rootDir, "new"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child after runas.Become: %v: %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "new")); err == nil {
		t.Fatalf("helper wrote into a root-only dir after shedding root")
	}
}
