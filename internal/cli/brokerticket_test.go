package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/cap/ticket"
)

// TestBrokerTicketOutRefusesTheTree attacks `lever broker ticket --out` with paths that
// land in the config's directory or the project tree by another spelling: a symlink outside
// that points in, the config named through a symlinked directory, a `..` after a symlink
// (the kernel resolves the link first; a lexical clean does not). Each is
// refused with exit 2, no file appears where the path leads, and no ticket is issued. The
// positive controls write a redeemable ticket through a plain path and through a symlink
// that points elsewhere, so the symlink rows fail on the target, not on being symlinks.
func TestBrokerTicketOutRefusesTheTree(t *testing.T) {
	proj, _ := filepath.EvalSymlinks(t.TempDir())
	state, _ := filepath.EvalSymlinks(t.TempDir())
	outside, _ := filepath.EvalSymlinks(t.TempDir())
	t.Setenv("LEVER_STATE_DIR", state)
	tree := filepath.Join(proj, "src")
	os.Mkdir(tree, 0o755)
	cfgPath := filepath.Join(proj, "lever.yaml")
	if err := os.WriteFile(cfgPath, []byte("name: tk\nbackend: orbstack\ntree: src\nbroker:\n  llm_auth: subscription\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(outside, "elsewhere")
	os.Mkdir(elsewhere, 0o700)
	links := map[string]string{"to-proj": proj, "to-tree": tree, "to-elsewhere": elsewhere, "proj-alias": proj}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(outside, name)); err != nil {
			t.Fatal(err)
		}
	}
	aliasCfg := filepath.Join(outside, "proj-alias", "lever.yaml")
	tickets := func() int {
		es, _ := os.ReadDir(brokerctl.TicketDir(filepath.Join(state, "tk")))
		return len(es)
	}
	for _, tc := range []struct {
		name, cfg, out string
		lands          string // where the file would be, symlinks resolved
		code           int
		stderr         string
	}{
		{"control: plain path outside", cfgPath, filepath.Join(outside, "t1"), filepath.Join(outside, "t1"), 0, ""},
		{"control: symlink to a directory outside", cfgPath, filepath.Join(outside, "to-elsewhere", "t2"), filepath.Join(elsewhere, "t2"), 0, ""},
		{"symlink into the config's directory", cfgPath, filepath.Join(outside, "to-proj", "t3"), filepath.Join(proj, "t3"), 2, "must never be written into the project tree"},
		{"symlink into the tree", cfgPath, filepath.Join(outside, "to-tree", "t4"), filepath.Join(tree, "t4"), 2, "must never be written into the project tree"},
		{"config named through a symlinked directory", aliasCfg, filepath.Join(proj, "t5"), filepath.Join(proj, "t5"), 2, "must never be written into the project tree"},
		{"dot-dot detour into the tree", cfgPath, outside + "/to-tree/../src/t6", filepath.Join(tree, "t6"), 2, "must never be written into the project tree"},
		{"directly in the tree", cfgPath, filepath.Join(tree, "t7"), filepath.Join(tree, "t7"), 2, "must never be written into the project tree"},
		{"a directory, not a file", cfgPath, outside + "/to-elsewhere/..", filepath.Join(outside, "nothing-here"), 2, "names a directory"},
		{"a directory that does not exist", cfgPath, filepath.Join(outside, "nodir", "t8"), filepath.Join(outside, "nodir", "t8"), 2, "its directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tickets()
			var out, errb bytes.Buffer
			code := Main([]string{"broker", "ticket", "-c", tc.cfg, "--agent", "w1", "--out", tc.out}, &out, &errb)
			if code != tc.code || !strings.Contains(errb.String(), tc.stderr) {
				t.Fatalf("exit %d (want %d)\nstderr: %s", code, tc.code, errb.String())
			}
			data, err := os.ReadFile(tc.lands)
			if tc.code != 0 {
				if err == nil {
					t.Fatalf("refused, yet %s was written", tc.lands)
				}
				if n := tickets(); n != before {
					t.Fatalf("refused, yet a ticket was issued (%d -> %d files)", before, n)
				}
				if !strings.HasPrefix(errb.String(), "lever: --out ") {
					t.Errorf("stderr %q does not name --out after lever's prefix", errb.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("ticket file: %v", err)
			}
			store, _ := ticket.Open(brokerctl.TicketDir(filepath.Join(state, "tk")))
			if _, err := store.Redeem(strings.TrimSpace(string(data)), "w1"); err != nil {
				t.Fatalf("written ticket does not redeem: %v", err)
			}
		})
	}
}
