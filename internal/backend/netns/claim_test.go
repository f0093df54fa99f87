package netns

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// claimWorld gives the claims a directory of their own and fake namespace roots, so that
// a jail is "live" exactly when the test says so.
func claimWorld(t *testing.T) (dir string, live func(ns string, up bool)) {
	t.Helper()
	dir = t.TempDir()
	run, etc := t.TempDir(), t.TempDir()
	old := liveRoots
	liveRoots = []string{run, etc}
	t.Cleanup(func() { liveRoots = old })
	return filepath.Join(dir, "claims"), func(ns string, up bool) {
		if up {
			os.MkdirAll(filepath.Join(etc, ns), 0o755)
		} else {
			os.RemoveAll(filepath.Join(etc, ns))
		}
	}
}

func jailFor(t *testing.T, name, user, dir string) *Backend {
	t.Helper()
	b, err := New(Options{Name: name, RunUser: user, ClaimDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRunUserClaim: the first jail to claim a run user owns it; a second live jail naming
// the same user is refused with an error naming the owner, the shared resources and the
// way out, and its claim attempt changes nothing; a jail with its own user is not
// refused (control); a claim whose jail is gone is taken over; release removes only the
// releaser's own claim.
func TestRunUserClaim(t *testing.T) {
	dir, live := claimWorld(t)
	a := jailFor(t, "alpha", "lvshared", dir)
	b := jailFor(t, "beta", "lvshared", dir)
	c := jailFor(t, "gamma", "lvgamma", dir)

	if err := a.ClaimRunUser(); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	live(a.Namespace(), true)
	if err := a.ClaimRunUser(); err != nil {
		t.Fatalf("the owner claiming again: %v", err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "lvshared"))

	err := b.ClaimRunUser()
	var shared *SharedRunUserError
	if !errors.As(err, &shared) {
		t.Fatalf("second jail on the same run user: %v, want a SharedRunUserError", err)
	}
	for _, want := range []string{"run user lvshared already belongs to jail alpha (namespace lever-alpha)", "jail beta cannot share it",
		"podman service", "network namespace", "credentials", "LEVER_NETNS_RUN_USER=lever-beta", "destroy the other jail first"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "lvshared")); string(after) != string(before) {
		t.Errorf("the refused claim changed the claim file: %q -> %q", before, after)
	}
	if owns, owner, err := b.OwnsRunUser(); err != nil || owns || !strings.Contains(owner, "alpha") {
		t.Errorf("beta OwnsRunUser = %v %q %v, want false naming alpha", owns, owner, err)
	}
	if owns, _, err := a.OwnsRunUser(); err != nil || !owns {
		t.Errorf("alpha OwnsRunUser = %v %v, want true", owns, err)
	}
	// Control: a jail with a run user of its own is not refused.
	if err := c.ClaimRunUser(); err != nil {
		t.Errorf("a jail with its own run user: %v", err)
	}
	// Releasing someone else's claim does nothing.
	if err := b.releaseRunUser(); err != nil {
		t.Fatal(err)
	}
	if owns, _, _ := a.OwnsRunUser(); !owns {
		t.Errorf("beta's release removed alpha's claim")
	}
	// The owner's jail gone without a release (destroyed by hand): the claim is stale.
	live(a.Namespace(), false)
	if err := b.ClaimRunUser(); err != nil {
		t.Fatalf("claim over a gone jail: %v", err)
	}
	if owns, _, _ := b.OwnsRunUser(); !owns {
		t.Errorf("beta does not own the user after taking over a stale claim")
	}
	if err := b.releaseRunUser(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "lvshared")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("release left the claim: %v", err)
	}
	// No claim at all (a jail made before claims): the jail may remove its user.
	if owns, owner, err := a.OwnsRunUser(); err != nil || !owns || owner != "" {
		t.Errorf("unclaimed user: OwnsRunUser = %v %q %v", owns, owner, err)
	}
}

// TestRunUserClaimRefusesBadFile: a claim that names nothing, or is a symlink, is an
// error that names the file, never a claim to overwrite or follow.
func TestRunUserClaimRefusesBadFile(t *testing.T) {
	dir, _ := claimWorld(t)
	os.MkdirAll(dir, 0o755)
	a := jailFor(t, "alpha", "lvbad", dir)
	os.WriteFile(filepath.Join(dir, "lvbad"), []byte("garbage\n"), 0o644)
	if err := a.ClaimRunUser(); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "lvbad")) || !strings.Contains(err.Error(), "names no namespace") {
		t.Errorf("garbage claim: %v", err)
	}
	target := filepath.Join(t.TempDir(), "elsewhere")
	os.WriteFile(target, []byte("namespace=lever-alpha\n"), 0o644)
	os.Remove(filepath.Join(dir, "lvbad"))
	os.Symlink(target, filepath.Join(dir, "lvbad"))
	if err := a.ClaimRunUser(); err == nil || !strings.Contains(err.Error(), "run user lvbad") {
		t.Errorf("symlinked claim followed: %v", err)
	}
}

func TestSuggestRunUser(t *testing.T) {
	if got := SuggestRunUser("dev"); got != "lever-dev" {
		t.Errorf("short name: %q", got)
	}
	long := strings.Repeat("a", 57)
	got := SuggestRunUser(long)
	if len(got) != 32 || !strings.HasPrefix(got, "lever-") || got == SuggestRunUser(strings.Repeat("a", 56)+"b") {
		t.Errorf("long name: %q (len %d)", got, len(got))
	}
}
