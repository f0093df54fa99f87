//go:build e2e

package bringup_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/acceptance"
	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/testutil"
)

// twoJail is one of TestTwoNetnsJailsE2E's jails: its lever.yaml and names.
type twoJail struct {
	name, cfg, ns, user string
	world               *world
}

// netnsInode is the inode of a network namespace file (/run/netns/X or /proc/PID/ns/net).
func netnsInode(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return st.Ino
}

// userContainerPid is the main pid of a container of the run user, read with podman itself.
func userContainerPid(t *testing.T, user, name string) int {
	t.Helper()
	uid := strings.TrimSpace(sh(t, "id", "-u", user))
	out := sh(t, "runuser", "-u", user, "--", "env", "XDG_RUNTIME_DIR=/run/user/"+uid, "HOME=/home/"+user,
		"podman", "inspect", "--format", "{{.State.Pid}}", name)
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || pid <= 0 {
		t.Fatalf("pid of %s: %q", name, out)
	}
	return pid
}

func userExists(user string) bool { return exec.Command("getent", "passwd", user).Run() == nil }

// TestTwoNetnsJailsE2E: two netns jails through the real `lever up`. (1) A second jail
// naming the run user the first owns (as two jails with the default user did) is refused
// with an error naming the first jail and the shared user, creates nothing, and its
// destroy leaves the first jail's user and containers alone. (2) With its own run user it
// comes up; each jail's manager container is in its own namespace (inode compared with
// /run/netns/<ns>) and acceptance passes for both. (3) Acceptance catches a container
// that is not in its jail's namespace: the run user's podman service restarted in another
// namespace (what a shared run user did) makes the next up create the manager there, and
// containers-rootless fails naming the namespaces; the control (service back in the
// jail) passes again. (4) Destroying the first jail leaves the second intact.
func TestTwoNetnsJailsE2E(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	rb := make([]byte, 3)
	rand.Read(rb)
	sfx := hex.EncodeToString(rb)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	key := "sk-lvtj-" + sfx + "-" + hex.EncodeToString(append(rb, rb...))
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	up := &upstream{}
	srv := httptest.NewServer(http.HandlerFunc(up.handler))
	defer srv.Close()
	hostAgents := filepath.Join(dir, "lev-agents")
	os.MkdirAll(hostAgents, 0o755)
	os.WriteFile(filepath.Join(hostAgents, "answer.toml"), []byte("name = \"answer\"\nversion = \"1\"\n[stages.answer]\ntools = [\"submit_output\"]\n"), 0o644)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_NETNS_PREFIX", "lvtb")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
	t.Setenv("LEVER_LEV_BINARY", levBinary(t))
	t.Setenv(asLever, "1")
	shared, own := "lvtj"+sfx, "lvtk"+sfx

	mk := func(tag string) *twoJail {
		name := "tj" + tag + sfx
		tree := filepath.Join(dir, "tree-"+tag)
		os.MkdirAll(filepath.Join(tree, "src"), 0o777)
		os.Chmod(tree, 0o777)
		cfg := filepath.Join(dir, "lever-"+tag+".yaml")
		jailPort, adminPort := freePort(t), freePort(t)
		y := testutil.NetnsYAML(name, keyFile, srv.URL, jailPort, adminPort)
		y.Tree = "tree-" + tag
		y.Lev.Agents = hostAgents
		y.Write(t, cfg)
		return &twoJail{name: name, cfg: cfg, ns: "lvtb" + name, world: newWorld(t, sfx+tag)}
	}
	a, b := mk("a"), mk("b")
	as := func(j *twoJail, user string) { j.user = user; t.Setenv(netns.RunUserEnv, user) }
	destroy := func(j *twoJail, user string) {
		as(j, user)
		if out, code := lever(t, "destroy", "-c", j.cfg); code != 0 {
			t.Errorf("destroy %s: exit %d\n%s", j.name, code, out)
		}
	}
	t.Cleanup(func() {
		destroy(b, own)
		destroy(a, shared)
		for _, u := range []string{shared, own} {
			os.Remove(filepath.Join(netns.ClaimDir, u))
		}
	})
	accept := func(j *twoJail) map[string]acceptance.Result {
		t.Helper()
		as(j, j.user)
		out, _ := lever(t, "acceptance", "--json", "--lan", lanAddr, "--internet", internetAddr, "--dns", dnsAddr,
			"--link-local", linkLocal, "--metadata", metadata, "-c", j.cfg)
		return checks(t, out)
	}
	mustPass := func(j *twoJail, stage string) {
		t.Helper()
		r := accept(j)["containers-rootless"]
		if r.Status != acceptance.Pass || !strings.Contains(r.Detail, "jail netns") {
			t.Fatalf("%s: %s containers-rootless %s: %s", stage, j.name, r.Status, r.Detail)
		}
	}
	inOwnNS := func(j *twoJail) {
		t.Helper()
		pid := userContainerPid(t, j.user, containers.ContainerName(j.name, containers.Manager, ""))
		if got, want := netnsInode(t, fmt.Sprintf("/proc/%d/ns/net", pid)), netnsInode(t, "/run/netns/"+j.ns); got != want {
			t.Errorf("%s's manager (pid %d) is in network namespace %d, not its jail's %d", j.name, pid, got, want)
		}
	}

	// 1. jail A with the run user both name.
	as(a, shared)
	if out, code := lever(t, "up", "-c", a.cfg); code != 0 {
		t.Fatalf("up %s: exit %d\n%s", a.name, code, out)
	}
	a.world.wire(t, a.ns)
	inOwnNS(a)
	mustPass(a, "after A's up")

	// 1b. jail B naming the same run user: refused, nothing made.
	as(b, shared)
	out, code := lever(t, "up", "-c", b.cfg)
	for _, want := range []string{"run user " + shared + " already belongs to jail " + a.name + " (namespace " + a.ns + ")",
		"jail " + b.name + " cannot share it", netns.RunUserEnv + "="} {
		if code == 0 || !strings.Contains(out, want) {
			t.Errorf("second up on a shared run user: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	if _, err := os.Stat("/run/netns/" + b.ns); err == nil {
		t.Errorf("the refused up made namespace %s", b.ns)
	}
	// ... and its destroy leaves A's run user and containers in place.
	destroy(b, shared)
	if !userExists(shared) {
		t.Fatalf("destroying the refused jail removed %s, the other jail's run user", shared)
	}
	inOwnNS(a)
	mustPass(a, "after the refused jail's destroy")

	// 2. B with a run user of its own: separate namespaces, both pass.
	as(b, own)
	if out, code := lever(t, "up", "-c", b.cfg); code != 0 {
		t.Fatalf("up %s with its own run user: exit %d\n%s", b.name, code, out)
	}
	b.world.wire(t, b.ns)
	inOwnNS(b)
	inOwnNS(a)
	mustPass(b, "after B's up")

	// 3. A container outside its jail's namespace: A's podman service moved to another
	// namespace (one this test made), A's manager recreated through it by a plain up.
	ctx := context.Background()
	elsewhere := "lvtjx" + sfx
	sh(t, "ip", "netns", "add", elsewhere)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", elsewhere).Run() })
	uidA, _ := strconv.Atoi(strings.TrimSpace(sh(t, "id", "-u", shared)))
	inA := &netns.Runner{Namespace: a.ns, RunUser: shared}
	inX := &netns.Runner{Namespace: elsewhere, RunUser: shared}
	rmManager := func() {
		sh(t, "runuser", "-u", shared, "--", "env", "XDG_RUNTIME_DIR=/run/user/"+strconv.Itoa(uidA), "HOME=/home/"+shared,
			"podman", "rm", "-f", "-t", "0", containers.ContainerName(a.name, containers.Manager, ""))
	}
	if err := containers.StopService(ctx, inA, uidA); err != nil {
		t.Fatal(err)
	}
	if _, err := containers.StartService(ctx, inX, shared); err != nil {
		t.Fatal(err)
	}
	rmManager()
	as(a, shared)
	if out, code := lever(t, "up", "-c", a.cfg); code != 0 {
		t.Fatalf("up %s with its service elsewhere: exit %d\n%s", a.name, code, out)
	}
	r := accept(a)["containers-rootless"]
	if r.Status != acceptance.Fail || !strings.Contains(r.Detail, "is in network namespace") || !strings.Contains(r.Detail, "not the jail's") {
		t.Fatalf("acceptance with the manager outside the jail's namespace: %s: %s", r.Status, r.Detail)
	}
	t.Logf("caught: %s", r.Detail)
	// Control: the service back in the jail's namespace, the manager recreated: passes.
	if err := containers.StopService(ctx, inX, uidA); err != nil {
		t.Fatal(err)
	}
	rmManager()
	if out, code := lever(t, "up", "-c", a.cfg); code != 0 {
		t.Fatalf("up %s with its service back: exit %d\n%s", a.name, code, out)
	}
	inOwnNS(a)
	mustPass(a, "control: the service back in the jail")

	// 4. Destroy A: its user and claim go, B stays whole.
	destroy(a, shared)
	if userExists(shared) {
		t.Errorf("destroy of %s left its run user %s", a.name, shared)
	}
	if _, err := os.Stat(filepath.Join(netns.ClaimDir, shared)); err == nil {
		t.Errorf("destroy of %s left its claim", a.name)
	}
	if !userExists(own) {
		t.Fatalf("destroying %s removed %s's run user", a.name, b.name)
	}
	inOwnNS(b)
	b.user = own
	mustPass(b, "after A's destroy")
}
