//go:build e2e && linux

package doctor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/testutil"
)

// TestNamespacesCounted: a real namespace named like lever's is a leftover while nothing
// runs in it, and in use (counted) once a process enters it.
func TestNamespacesCounted(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	b := make([]byte, 3)
	rand.Read(b)
	name := NamespacePrefix + "f3t" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", name).Run() })
	count := func() int {
		ns, err := HostProbe{}.Namespaces()
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.Name == name {
				return n.Procs
			}
		}
		t.Fatalf("%s not listed: %+v", name, ns)
		return 0
	}
	if n := count(); n != 0 {
		t.Fatalf("empty namespace: %d processes", n)
	}
	if c := namespaceCheck(HostProbe{}.Namespaces()); c.Status != Warn {
		t.Errorf("check on an empty namespace: %+v", c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", name, "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	n := 0
	for end := time.Now().Add(5 * time.Second); n == 0 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		n = count()
	}
	if n != 1 {
		t.Errorf("namespace with sleep inside: %d processes, want 1", n)
	}
}
