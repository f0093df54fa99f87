//go:build e2e

package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"testing"
)

// TestRunUserSameAccountOtherName: two passwd names for one uid (`useradd -o`, real
// accounts) are one account: the jails would share its podman service, containers and
// credentials. A second live jail naming the other spelling is refused at its claim,
// naming the uid, the first name and its owner, and does not own the account at destroy
// (OwnsRunUser false, so its teardown leaves the other jail's processes alone). Controls:
// a jail with an account of its own claims; once the first jail is gone, the alias is
// claimable.
func TestRunUserSameAccountOtherName(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to add accounts")
	}
	first := fmt.Sprintf("lvtsa%d", os.Getpid()%100000)
	alias := first + "b"
	if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", first).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", first, err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", first).Run() })
	u, err := user.Lookup(first)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "-o", "-u", u.Uid, "-g", u.Gid, alias).CombinedOutput(); err != nil {
		t.Fatalf("useradd -o %s: %v: %s", alias, err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", alias).Run() })
	if a, err := user.Lookup(alias); err != nil || a.Uid != u.Uid {
		t.Fatalf("alias %s: %v %v, want uid %s", alias, a, err, u.Uid)
	}

	dir, live := claimWorld(t)
	a := jailFor(t, "alpha", first, dir)
	b := jailFor(t, "beta", alias, dir)
	c := jailFor(t, "gamma", "nobody", dir)
	if err := a.ClaimRunUser(); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	live(a.Namespace(), true)

	err = b.ClaimRunUser()
	var shared *SharedRunUserError
	if !errors.As(err, &shared) {
		t.Fatalf("the same account under another name: %v, want a SharedRunUserError", err)
	}
	for _, want := range []string{"uid " + u.Uid, "the account of run user " + first, "jail alpha (namespace lever-alpha)", "jail beta cannot share it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if _, err := os.Stat(b.claimPath()); err == nil {
		t.Errorf("the refused claim wrote %s", b.claimPath())
	}
	if owns, owner, err := b.OwnsRunUser(); err != nil || owns || !strings.Contains(owner, "alpha") {
		t.Errorf("beta OwnsRunUser = %v %q %v, want false naming alpha", owns, owner, err)
	}
	// Controls.
	if err := c.ClaimRunUser(); err != nil {
		t.Errorf("a jail with its own account: %v", err)
	}
	if owns, _, err := a.OwnsRunUser(); err != nil || !owns {
		t.Errorf("alpha OwnsRunUser = %v %v, want true", owns, err)
	}
	live(a.Namespace(), false)
	if err := b.ClaimRunUser(); err != nil {
		t.Errorf("the alias once the first jail is gone: %v", err)
	}
}
