//go:build e2e

package containers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/provision"
	"github.com/lever-jail/lever/internal/testutil"
)

// nsRunner is the test's own guest: a network namespace it made, with commands run by
// `ip netns exec`, as root or (through runuser) as the run user.
type nsRunner struct {
	ns, user string
}

func (r nsRunner) Run(ctx context.Context, c guest.Cmd) (guest.Result, error) {
	argv := []string{"netns", "exec", r.ns}
	if c.As == guest.RunUser {
		argv = append(argv, "runuser", "-u", r.user, "--")
	}
	cmd := exec.CommandContext(ctx, "ip", append(argv, c.Argv...)...)
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := guest.Result{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.ExitCode = ee.ExitCode()
		return res, nil
	}
	return res, err
}

// testGuest is a provisioned namespace guest with the run user's podman service running.
type testGuest struct {
	ns, user string
	uid      int
	home     string
	sock     string
	runner   nsRunner
	client   *Client
	runtime  string
}

func suffix() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newTestGuest makes a namespace lvtbj<rand>, provisions the run user lvtbj<rand> with
// lever's real provisioning script, and starts that user's podman REST service inside the
// namespace. Everything is removed in t.Cleanup.
func newTestGuest(t *testing.T) *testGuest {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "ip")
	s := suffix()
	g := &testGuest{ns: "lvtbj" + s, user: "lvtbj" + s}
	g.runner = nsRunner{ns: g.ns, user: g.user}
	if out, err := exec.Command("ip", "netns", "add", g.ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	stampDir := t.TempDir()
	t.Cleanup(func() { cleanupGuest(t, g) })
	exec.Command("ip", "netns", "exec", g.ns, "ip", "link", "set", "lo", "up").Run()
	ctx := context.Background()
	res, err := provision.Run(ctx, g.runner, provision.Params{RunUser: g.user, Stamp: filepath.Join(stampDir, "provision.stamp")}, false)
	if err != nil {
		t.Fatalf("provisioning: %v", err)
	}
	g.uid, g.runtime = res.UID, res.Runtime
	g.home = "/home/" + g.user
	g.sock = fmt.Sprintf("/run/user/%d/podman/podman.sock", g.uid)
	if _, err := StartService(ctx, g.runner, g.user); err != nil {
		t.Fatalf("starting podman service: %v", err)
	}
	c, err := Connect(ctx, "unix://"+g.sock)
	if err != nil {
		t.Fatalf("%v", err)
	}
	g.client = c
	return g
}

func cleanupGuest(t *testing.T, g *testGuest) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if g.uid != 0 {
		StopService(ctx, g.runner, g.uid)
		// podman's storage holds files owned by subordinate ids: unshare removes them.
		g.runner.Run(ctx, guest.Cmd{As: guest.RunUser, Argv: []string{"podman", "system", "reset", "--force"}})
		exec.Command("pkill", "-KILL", "-u", g.user).Run()
	}
	exec.Command("ip", "netns", "del", g.ns).Run()
	if out, err := exec.Command("userdel", "--remove", g.user).CombinedOutput(); err != nil && !strings.Contains(string(out), "does not exist") {
		t.Logf("userdel %s: %v: %s", g.user, err, out)
	}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		if b, _ := os.ReadFile(f); !strings.Contains("\n"+string(b), "\n"+g.user+":") {
			continue // userdel removed it (a rewrite would race other writers)
		}
		b, _ := os.ReadFile(f)
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" && !strings.HasPrefix(l, g.user+":") {
				keep = append(keep, l)
			}
		}
		out := strings.Join(keep, "\n")
		if out != "" {
			out += "\n"
		}
		os.WriteFile(f, []byte(out), 0o644)
	}
	if g.uid != 0 {
		os.RemoveAll(fmt.Sprintf("/run/user/%d", g.uid))
	}
}

// buildProbe builds testdata/capprobe as a static binary.
func buildProbe(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "capprobe")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/capprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building capprobe: %v: %s", err, b)
	}
	return out
}
