package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func staticLev(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\nfunc main(){}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\ngo 1.22\n"), 0o644)
	out := filepath.Join(dir, "lev")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building: %v: %s", err, b)
	}
	return out
}

// A dry run from nothing plans every step, egress before anything that starts, and
// touches nothing: no state dir, no namespace.
func TestApplyDryRunFromNothing(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tree"), 0o755)
	key := filepath.Join(dir, "key")
	os.WriteFile(key, []byte("sk-x\n"), 0o600)
	cfg := filepath.Join(dir, "lever.yaml")
	os.WriteFile(cfg, []byte("name: dryrun\nbackend: netns\ntree: tree\nmanager:\n  allow_ports: [7443]\nbroker:\n  api_key_file: "+key+"\n  llm_upstream: http://127.0.0.1:9/v1\n  jail_port: 7443\n  admin_port: 7444\n"), 0o644)
	state := filepath.Join(dir, "state")
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_STATE_DIR", state)
	t.Setenv("LEVER_NETNS_PREFIX", "lvtbdry")
	t.Setenv("LEVER_LEV_BINARY", staticLev(t))
	var out, errb bytes.Buffer
	code := Main([]string{"apply", "--dry-run", "-c", cfg}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	want := []string{
		"1. jail      create guest is not reachable",
		"2. egress    create applied as soon as the guest is up, before anything starts",
		"3. provision create",
		"4. broker    start",
		"5. podman    start",
		"6. enrol     create enrol manager",
		"7. image     create load localhost/lever/lev:",
		"8. lev       create lever-dryrun-manager (create)",
	}
	// The plan, then what the config grants (trust.go).
	plan, grants, ok := strings.Cut(out.String(), "grants of "+cfg)
	if !ok || !strings.Contains(grants, "api key file:        "+key) || !strings.Contains(grants, "allowed ports:       7443") {
		t.Fatalf("no grants block naming the key and the port after the plan:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSpace(plan), "\n")
	if len(lines) != len(want) {
		t.Fatalf("plan:\n%s", out.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want prefix %q", i+1, lines[i], w)
		}
	}
	if _, err := os.Stat(state); err == nil {
		t.Errorf("dry run created the state dir")
	}
	if _, err := os.Stat("/run/netns/lvtbdrydryrun"); err == nil {
		t.Errorf("dry run created the namespace")
	}
}

func TestApplyRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, yaml, want string
	}{
		{"unknown key", "name: x\nbackend: netns\nbogus: 1\n", "bogus"},
		{"unknown backend", "name: x\nbackend: docker\n", "docker"},
	}
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(dir, "state"))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(dir, tc.name+".yaml")
			os.WriteFile(cfg, []byte(tc.yaml), 0o644)
			for _, cmd := range []string{"apply", "up", "status", "acceptance"} {
				var out, errb bytes.Buffer
				code := Main([]string{cmd, "-c", cfg}, &out, &errb)
				if code != 2 || !strings.Contains(errb.String(), tc.want) {
					t.Errorf("%s: exit %d, stderr %q, want 2 naming %q", cmd, code, errb.String(), tc.want)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "state")); err == nil {
				t.Errorf("refused config changed host state")
			}
		})
	}
}
