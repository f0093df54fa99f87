//go:build e2e

package netns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/testutil"
)

func TestNetnsLifecycle(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	testutil.RequireTool(t, "getent")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := New(Options{Name: fmt.Sprintf("nb%d", os.Getpid()), Prefix: "lvt-e", RunUser: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Destroy(context.Background()) })

	for i := 0; i < 2; i++ { // the second EnsureUp must be a no-op, not an error
		if err := b.EnsureUp(ctx); err != nil {
			t.Fatalf("EnsureUp #%d: %v", i+1, err)
		}
	}
	r := b.Runner()
	out := func(as guest.As, argv ...string) string {
		t.Helper()
		res, err := guest.RunOK(ctx, r, guest.Cmd{Argv: argv, As: as})
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(res.Stdout))
	}
	h4, h6 := b.HostAddrs()
	// The alias resolves inside the namespace, in both families.
	if got := out(guest.Root, "getent", "ahostsv4", AliasName); !strings.HasPrefix(got, h4.String()+" ") {
		t.Errorf("alias IPv4 resolution: %q, want %s", got, h4)
	}
	if got := out(guest.Root, "getent", "ahostsv6", AliasName); !strings.HasPrefix(got, h6.String()+" ") {
		t.Errorf("alias IPv6 resolution: %q, want %s", got, h6)
	}
	// No resolver: a name outside the hosts file fails (and nothing is asked upstream).
	if res, err := r.Run(ctx, guest.Cmd{Argv: []string{"getent", "ahostsv4", "example.invalid"}}); err != nil || res.ExitCode == 0 {
		t.Errorf("lookup outside the hosts file: %+v %v", res, err)
	}
	// No default route in either family.
	for _, fam := range []string{"-4", "-6"} {
		if got := out(guest.Root, "ip", fam, "route", "show", "default"); got != "" {
			t.Errorf("default route %s present: %q", fam, got)
		}
	}
	if got := out(guest.Root, "ip", "-o", "link", "show", "lo"); !strings.Contains(got, "UP") && !strings.Contains(got, "LOWER_UP") {
		t.Errorf("lo not up: %q", got)
	}
	// The run user is who runs run-user commands; the exit code comes back as such.
	if got := out(guest.RunUser, "id", "-un"); got != "nobody" {
		t.Errorf("run user = %q", got)
	}
	res, err := r.Run(ctx, guest.Cmd{Argv: []string{"sh", "-c", "cat; exit 7"}, Stdin: []byte("in")})
	if err != nil || res.ExitCode != 7 || string(res.Stdout) != "in" {
		t.Errorf("exit/stdin: %+v %v", res, err)
	}

	// Stop: namespace and veth gone, overlay kept; the runner reports the guest as down.
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if nsExists(b.Namespace()) || b.linkExists(ctx) {
		t.Error("namespace or veth survived stop")
	}
	if _, err := os.Stat(b.EtcDir()); err != nil {
		t.Errorf("stop removed the overlay: %v", err)
	}
	if _, err := r.Run(ctx, guest.Cmd{Argv: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("runner on a stopped guest: %v", err)
	}
	if err := b.EnsureUp(ctx); err != nil {
		t.Fatalf("EnsureUp after stop: %v", err)
	}
	if err := b.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.EtcDir()); !os.IsNotExist(err) {
		t.Errorf("destroy left %s", b.EtcDir())
	}
	if err := exec.Command("ip", "link", "show", b.HostVeth()).Run(); err == nil {
		t.Error("destroy left the veth")
	}
}
