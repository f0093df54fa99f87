package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The `lev policy` command tests, moved here from package policy with the command.

func runPolicy(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newPolicyCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestPolicyCommands(t *testing.T) {
	t.Setenv("LEV_CONFIG", filepath.Join(t.TempDir(), "no-config.toml"))
	path := filepath.Join(t.TempDir(), "policy.toml")
	out, err := runPolicy(t, "--policy", path, "list")
	if err != nil || !strings.Contains(out, "submit_output") || !strings.Contains(out, "(none)") {
		t.Fatalf("list on empty policy: %v\n%s", err, out)
	}
	// Before any rule: shell with private data asks, blocks headless, is waived under yolo.
	out, err = runPolicy(t, "--policy", path, "test", "http_post", "--target", "api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"taint:     private", "policy:    ask (default)", "asks you", "headless:    BLOCKED before it fires; audited as AutoBlock", "--yolo:      runs; audited as AutoBlock + YoloAutoApprove"} {
		if !strings.Contains(out, want) {
			t.Errorf("test output lacks %q:\n%s", want, out)
		}
	}
	out, err = runPolicy(t, "--policy", path, "add", "http_post", "--target", "*.example.com", "--max-sensitivity", "private")
	if err != nil || !strings.Contains(out, "added allow[0]") {
		t.Fatalf("add: %v %s", err, out)
	}
	out, _ = runPolicy(t, "--policy", path, "test", "http_post", "--target", "api.example.com")
	if !strings.Contains(out, "allow (allow[0])") || !strings.Contains(out, "headless:    runs; audited as PolicyAllow") {
		t.Errorf("after add:\n%s", out)
	}
	out, _ = runPolicy(t, "--policy", path, "test", "http_post", "--target", "api.example.com.evil.test")
	if !strings.Contains(out, "BLOCKED") {
		t.Errorf("lookalike passed:\n%s", out)
	}
	out, _ = runPolicy(t, "--policy", path, "test", "http_post", "--target", "api.example.com", "--taint", "internal")
	if !strings.Contains(out, "runs in every mode") {
		t.Errorf("internal data:\n%s", out)
	}
	out, _ = runPolicy(t, "--policy", path, "test", "mcp__x__send", "--target", "t", "--taint", "internal")
	if !strings.Contains(out, "unclassified") || !strings.Contains(out, "BLOCKED") {
		t.Errorf("unknown tool:\n%s", out)
	}
	out, _ = runPolicy(t, "--policy", path, "test", "read_file", "--target", "t")
	if !strings.Contains(out, "not gated") {
		t.Errorf("read_file:\n%s", out)
	}
	out, err = runPolicy(t, "--policy", path, "test", "shell", "--target", "x", "--json")
	if err != nil || !strings.Contains(out, `"decision_source": "YoloAutoApprove"`) {
		t.Errorf("json: %v\n%s", err, out)
	}
	out, _ = runPolicy(t, "--policy", path, "list")
	if !strings.Contains(out, `allow[0] http_post --target "*.example.com" --max-sensitivity private`) {
		t.Errorf("list after add:\n%s", out)
	}
	if _, err := runPolicy(t, "--policy", path, "test", "shell", "--taint", "secret"); err == nil {
		t.Error("bad --taint accepted")
	}
	if _, err := runPolicy(t, "--policy", path, "add", "shell", "--target", "x"); err == nil {
		t.Error("add without --max-sensitivity accepted")
	}
}

// lev policy test applies config.toml's [taint_tracking] as live runs do.
func TestDryRunAppliesConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	os.WriteFile(cfg, []byte("[taint_tracking]\non_violation = \"deny\"\nclearances = { web_fetch = \"private\" }\n"), 0o600)
	t.Setenv("LEV_CONFIG", cfg)
	pol := filepath.Join(dir, "policy.toml")
	out, err := runPolicy(t, "--policy", pol, "test", "http_post", "--target", "x.test")
	if err != nil || !strings.Contains(out, "policy:    deny (default)") || !strings.Contains(out, "headless:    BLOCKED before it fires; audited as PolicyDeny") ||
		!strings.Contains(out, "--yolo:      BLOCKED before it fires; audited as PolicyDeny") || !strings.Contains(out, "config.toml [taint_tracking] applied") {
		t.Errorf("on_violation from config: %v\n%s", err, out)
	}
	if out, _ := runPolicy(t, "--policy", pol, "test", "web_fetch", "--target", "x.test"); !strings.Contains(out, "runs in every mode") {
		t.Errorf("clearance from config:\n%s", out)
	}
}
