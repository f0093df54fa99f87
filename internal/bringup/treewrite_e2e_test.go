//go:build e2e

package bringup_test

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/testutil"
)

// TestTreeNotWritableWarnsNetns: a tree the run user cannot write (root's, mode 0755) is
// brought up, and lever up says so, naming the tree and the fix, in its status (a first
// up: the run user exists only once provisioned) and, on the next up, as a warning before
// the steps; the probe rides in the observation, so a warm up is still one guest call,
// and it leaves nothing in the tree. The control is the same jail once the tree is the run
// user's: no warning, the same one call.
func TestTreeNotWritableWarnsNetns(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	b := make([]byte, 3)
	rand.Read(b)
	sfx := hex.EncodeToString(b)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(tree, 0o755) // root's: the run user reads it and cannot write it
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte("sk-lvtb-"+sfx+"-0123456789\n"), 0o600)
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	jailPort, adminPort := freePort(t), freePort(t)
	cfgPath := filepath.Join(dir, "lever.yaml")
	testutil.NetnsYAML("w"+sfx, keyFile, srv.URL, jailPort, adminPort).Write(t, cfgPath)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_NETNS_PREFIX", "lvtb")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
	t.Setenv("LEVER_LEV_BINARY", levBinary(t))
	t.Setenv(asLever, "1")
	t.Cleanup(func() { lever(t, "destroy", "-c", cfgPath) })

	warning := "the run user lever cannot write the tree " + tree
	fix := "fix: give lever the tree (chown -R lever " + tree + ")"
	noProbeLeft := func(stage string) {
		t.Helper()
		ents, _ := os.ReadDir(tree)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".lever-write-probe") {
				t.Errorf("%s: the probe left %s in the tree", stage, e.Name())
			}
		}
	}

	out, code := lever(t, "up", "-c", cfgPath)
	t.Logf("first up:\n%s", out)
	if code != 0 {
		t.Fatalf("first up: exit %d", code)
	}
	if !strings.Contains(out, "tree:    WARNING: "+warning) || !strings.Contains(out, fix) || !strings.Contains(out, "Permission denied") {
		t.Fatalf("the first up's status does not warn that the run user cannot write %s, with the fix", tree)
	}
	noProbeLeft("first up")

	// A warm up: the warning comes before the steps, from the one guest call.
	out, code = lever(t, "apply", "--json", "-c", cfgPath)
	res, err := resultOf(out)
	if err != nil || code != 0 {
		t.Fatalf("warm apply --json: %v %d\n%s", err, code, out)
	}
	if !strings.HasPrefix(out, "warning: "+warning) {
		t.Errorf("a warm up does not warn first:\n%s", out)
	}
	if res.GuestCalls != 1 {
		t.Errorf("warm up with the probe: %d guest calls, want 1 (the probe rides in the observation)", res.GuestCalls)
	}
	out, code = lever(t, "status", "-c", cfgPath)
	if !strings.Contains(out, "tree:    WARNING: "+warning) {
		t.Errorf("status does not warn (exit %d):\n%s", code, out)
	}
	noProbeLeft("warm up")

	// The control: the tree made the run user's, the same warm up says nothing, in the
	// same one call, and the probe file is gone.
	sh(t, "chown", "lever", tree)
	out, code = lever(t, "apply", "--json", "-c", cfgPath)
	res2, err := resultOf(out)
	if err != nil || code != 0 || res2.GuestCalls != 1 || strings.Contains(out, "cannot write the tree") {
		t.Fatalf("warm up on a writable tree: exit %d, %d guest calls, %v\n%s", code, res2.GuestCalls, err, out)
	}
	out, _ = lever(t, "up", "-c", cfgPath)
	if strings.Contains(out, "WARNING") || strings.Contains(out, "cannot write the tree") {
		t.Errorf("up on a writable tree warns:\n%s", out)
	}
	noProbeLeft("control")
}
