package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/levimage/levtest"
)

// TestApplyRefusesLevOfOtherArch: `lever apply --dry-run` on the netns substrate (whose
// guest is this host) refuses a LEVER_LEV_BINARY built for the other architecture, or a
// Mac's lev, naming the file and both architectures, before anything is touched; the lev
// for this host's architecture plans (the control that the same command reaches the check).
func TestApplyRefusesLevOfOtherArch(t *testing.T) {
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if other == "" {
		t.Skipf("lever ships lev for amd64 and arm64 guests; this host is %s", runtime.GOARCH)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tree"), 0o755)
	key := filepath.Join(dir, "key")
	os.WriteFile(key, []byte("sk-x\n"), 0o600)
	cfg := filepath.Join(dir, "lever.yaml")
	os.WriteFile(cfg, []byte("name: levarch\nbackend: netns\ntree: tree\nmanager:\n  allow_ports: [7443]\nbroker:\n  api_key_file: "+key+"\n  llm_upstream: http://127.0.0.1:9/v1\n  jail_port: 7443\n  admin_port: 7444\n"), 0o644)
	state := filepath.Join(dir, "state")
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_STATE_DIR", state)
	t.Setenv("LEVER_NETNS_PREFIX", "lvtbarch")
	for _, tc := range []struct {
		name string
		lev  string
		want []string // nil: plans
	}{
		{"this host's arch (control)", levtest.Binary(t, "linux", runtime.GOARCH), nil},
		{"the other arch", levtest.Binary(t, "linux", other), []string{"LEVER_LEV_BINARY", "built for linux/" + other, "the guest is linux/" + runtime.GOARCH}},
		{"a Mac's lev", levtest.Binary(t, "darwin", runtime.GOARCH), []string{"LEVER_LEV_BINARY", "not an ELF executable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LEVER_LEV_BINARY", tc.lev)
			var out, errb bytes.Buffer
			code := Main([]string{"apply", "--dry-run", "-c", cfg}, &out, &errb)
			if tc.want == nil {
				if code != 0 || !strings.Contains(out.String(), "enrol") {
					t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
				}
			} else {
				if code == 0 {
					t.Fatalf("planned with %s:\n%s", tc.lev, out.String())
				}
				for _, w := range append(tc.want, tc.lev) {
					if !strings.Contains(errb.String(), w) {
						t.Fatalf("error %q does not say %q", errb.String(), w)
					}
				}
			}
			if _, err := os.Stat(state); err == nil {
				t.Fatal("the dry run created the state dir")
			}
		})
	}
}
