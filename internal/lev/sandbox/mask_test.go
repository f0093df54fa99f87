package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMaskHolds runs real commands under MaskArgv: what an attacker in the shell would try
// (cat, umount, a hard link, a bind mount of the parent, remounting read-write) finds the
// masked directory empty and the masked file empty; the unmasked file beside them reads.
func TestMaskHolds(t *testing.T) {
	unshare, err := CheckMask(context.Background(), nil)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("masking is unavailable, and under CI=true a skipped test is a failure: %v", err)
		}
		t.Skip(err)
	}
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home, key := filepath.Join(root, "home"), filepath.Join(root, "client.key")
	os.MkdirAll(home, 0o700)
	os.WriteFile(filepath.Join(home, "token"), []byte("SECRET-TOKEN"), 0o600)
	os.WriteFile(key, []byte("SECRET-KEY"), 0o600)
	os.WriteFile(filepath.Join(root, "plain.txt"), []byte("plain content"), 0o644)
	cases := []struct{ name, script string }{
		{"cat", "cat home/token client.key"},
		{"umount", "umount home; umount -l home; umount client.key; cat home/token client.key"},
		{"hard link", "ln home/token h1; ln client.key h2; cat h1 h2"},
		{"bind the parent", "mkdir -p b && mount --bind . b && cat b/home/token b/client.key"},
		{"remount rw", "mount -o remount,rw home; cat home/token"},
		{"proc of the parent", "cat /proc/*/root" + home + "/token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			argv := MaskArgv(unshare, true, []string{home, key}, tc.script+"; cat plain.txt")
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = root
			out, _ := cmd.CombinedOutput()
			if strings.Contains(string(out), "SECRET") {
				t.Fatalf("mask leaked:\n%s", out)
			}
			if !strings.Contains(string(out), "plain content") {
				t.Fatalf("control: the unmasked file did not read (did the command run?):\n%s", out)
			}
		})
	}
	// Control for the test itself: without the mask, the same cat does read the secret.
	out, _ := exec.Command("sh", "-c", "cd "+root+" && cat home/token").CombinedOutput()
	if !strings.Contains(string(out), "SECRET-TOKEN") {
		t.Fatalf("unmasked control: %s", out)
	}
}
