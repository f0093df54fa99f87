//go:build e2e

package bringup_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/testutil"
)

// TestTeardownSparesForeignUser attacks destroy's user removal: a host account with the
// run user's name that lever did not create must survive, home and all.
func TestTeardownSparesForeignUser(t *testing.T) {
	testutil.RequireRoot(t)
	const user = "lvtbforeign"
	exec.Command("userdel", "--remove", user).Run()
	if out, err := exec.Command("useradd", "--create-home", "--user-group", user).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", "--remove", user).Run() })

	b, err := netns.New(netns.Options{Name: "tdforeign", Prefix: "lvtb-", RunUser: user})
	if err != nil {
		t.Fatal(err)
	}
	err = bringup.TeardownInPlace(context.Background(), b)
	if err == nil || !strings.Contains(err.Error(), "was not created by lever") {
		t.Fatalf("teardown of a foreign user: got %v, want a refusal", err)
	}
	if exec.Command("id", user).Run() != nil {
		t.Fatalf("teardown removed the foreign user %s", user)
	}

	// The same name made the way provisioning makes it is lever's, and goes.
	exec.Command("userdel", "--remove", user).Run()
	if out, err := exec.Command("useradd", "--create-home", "--user-group", "--comment", bringup.RunUserComment, user).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	if err := bringup.TeardownInPlace(context.Background(), b); err != nil {
		t.Fatalf("teardown of lever's own run user: %v", err)
	}
	if exec.Command("id", user).Run() == nil {
		t.Fatalf("teardown left lever's run user %s", user)
	}
}
