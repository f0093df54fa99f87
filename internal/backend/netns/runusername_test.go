package netns

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunUserNameSpellings: a run user that is not a plain user name is refused by New
// (which `lever up`, `status` and `destroy` all go through), naming the value and
// LEVER_NETNS_RUN_USER, before any claim is read or written. The attack spellings:
// digits (`id -u`, `getent passwd` and `pkill -u` take them for a uid, so "65534" is
// nobody's account under a claim file of another name), path spellings that would put
// the claim file (written as root) elsewhere, and names useradd would never make.
// Controls: plain names are accepted and their claim lands in the claim directory.
func TestRunUserNameSpellings(t *testing.T) {
	dir, _ := claimWorld(t)
	for _, c := range []struct {
		user string
		ok   bool
	}{
		{"65534", false},
		{"0", false},
		{"1001x", false},
		{"../../etc/passwd", false},
		{"lever/", false},
		{"lever/../other", false},
		{".lever", false},
		{"-lever", false},
		{"lever user", false},
		{"lever\n", false},
		{strings.Repeat("a", 33), false},
		{"lever", true},
		{"nobody", true},
		{"lever-alpha_1.x", true},
		{"_svc", true},
		{strings.Repeat("a", 32), true},
	} {
		t.Setenv(RunUserEnv, c.user)
		b, err := New(Options{Name: "spell", ClaimDir: dir})
		if !c.ok {
			if err == nil || !strings.Contains(err.Error(), RunUserEnv) || !strings.Contains(err.Error(), "not a user name") {
				t.Errorf("run user %q: New = %v, want a refusal naming %s", c.user, err, RunUserEnv)
			}
			continue
		}
		if err != nil {
			t.Errorf("control %q: %v", c.user, err)
			continue
		}
		if err := b.ClaimRunUser(); err != nil {
			t.Errorf("control %q: claim: %v", c.user, err)
		} else if _, err := os.Stat(filepath.Join(dir, c.user)); err != nil {
			t.Errorf("control %q: no claim file: %v", c.user, err)
		}
		b.releaseRunUser()
	}
	// Nothing but the controls' (released) claims was ever written.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		t.Errorf("left in the claim directory: %s", e.Name())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "etc")); err == nil {
		t.Errorf("a path spelling wrote outside the claim directory")
	}
}
