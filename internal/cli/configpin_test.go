package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/hosttrust"
)

// TestChangedConfigInTheTreeRefused: a lever.yaml in the tree that is not the one lever
// last brought up (an agent could have written it past the read-only mount: after a save
// by rename, or as LEVER.YAML on a case-insensitive Mac) is refused by every command that
// reads it, until --accept-config or the copy put back; the same file outside the tree is
// never compared.
func TestChangedConfigInTheTreeRefused(t *testing.T) {
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(t.TempDir(), "state"))
	proj := t.TempDir()
	os.WriteFile(filepath.Join(filepath.Dir(proj), filepath.Base(proj)+".key"), []byte("sk-test\n"), 0o600)
	body := "name: pin\nbackend: netns\ntree: .\negress: closed\nmanager:\n  allow_ports: [7443]\nbroker:\n  llm_auth: api-key\n  api_key_file: ../" + filepath.Base(proj) + ".key\n"
	cfg := filepath.Join(proj, "lever.yaml")
	os.WriteFile(cfg, []byte(body), 0o644)
	plan := func(extra ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(append(append([]string{}, extra...), "egress", "plan", "-c", cfg, "--alias-v4", "10.1.2.3", "--alias-v6", "fd00::3"), &out, &errb)
		return code, errb.String()
	}
	if code, errs := plan(); code != 0 {
		t.Fatalf("never brought up (no copy): exit %d %s", code, errs)
	}
	// As a bring-up leaves it: the copy of the bytes it brought up.
	real, _ := filepath.EvalSymlinks(cfg)
	if err := hosttrust.AcceptConfig(config.StateRoot(), real, []byte(body)); err != nil {
		t.Fatal(err)
	}
	if code, errs := plan(); code != 0 {
		t.Fatalf("control, unchanged: exit %d %s", code, errs)
	}
	os.WriteFile(cfg, []byte(strings.Replace(body, "egress: closed", "egress: open", 1)), 0o644)
	code, errs := plan()
	if code != 2 || !strings.Contains(errs, "lever.yaml changed since lever last brought this jail up") || !strings.Contains(errs, "lever up -c "+real+" --accept-config") {
		t.Fatalf("a changed lever.yaml in the tree: exit %d, want 2 saying what to do: %s", code, errs)
	}
	// stop and destroy read it too (only its identity).
	var out, errb bytes.Buffer
	if code := Main([]string{"stop", "-c", cfg}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "changed since lever last brought") {
		t.Errorf("lever stop on the changed file: exit %d %s", code, errb.String())
	}
	// The broker a bring-up starts reads the file again: it takes the bytes that bring-up
	// checked (their digest in its environment), and nothing else.
	changed, _ := os.ReadFile(cfg)
	t.Setenv(configDigestEnv, digest([]byte(body)))
	if code, errs := plan(); code != 2 || !strings.Contains(errs, "changed while lever was bringing the jail up") {
		t.Errorf("the broker's read of other bytes: exit %d %s", code, errs)
	}
	t.Setenv(configDigestEnv, digest(changed))
	if code, errs := plan(); code != 0 {
		t.Errorf("the broker's read of the bytes the bring-up checked: exit %d %s", code, errs)
	}
	t.Setenv(configDigestEnv, "")
	// The person says it is theirs: accepted, and from then on it is the copy.
	if code, errs := plan("--accept-config"); code != 0 {
		t.Fatalf("--accept-config: exit %d %s", code, errs)
	}
	if code, errs := plan(); code != 0 {
		t.Fatalf("after --accept-config: exit %d %s", code, errs)
	}

	// Outside the tree nothing is compared: the agents cannot write it.
	outside := filepath.Join(filepath.Dir(proj), "outside.yaml")
	os.WriteFile(outside, []byte(strings.Replace(strings.Replace(body, "tree: .", "tree: \""+filepath.Base(proj)+"\"", 1), "../", "", 1)), 0o644)
	if got := hosttrust.ConfigPin(config.StateRoot(), outside); fileExists(got) {
		t.Fatalf("a copy exists for a file outside the tree: %s", got)
	}
	out.Reset()
	errb.Reset()
	if code := Main([]string{"egress", "plan", "-c", outside, "--alias-v4", "10.1.2.3", "--alias-v6", "fd00::3"}, &out, &errb); code != 0 {
		t.Fatalf("outside the tree: exit %d %s", code, errb.String())
	}
	if got := hosttrust.ConfigPin(config.StateRoot(), outside); fileExists(got) {
		t.Errorf("a copy was kept for a file outside the tree")
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
