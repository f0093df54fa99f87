package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func egressConfig(t *testing.T, posture string) string {
	t.Helper()
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "tree"), 0o755)
	os.WriteFile(filepath.Join(dir, "key"), []byte("sk-test\n"), 0o600)
	cfg := filepath.Join(dir, "lever.yaml")
	os.WriteFile(cfg, []byte("name: plan\nbackend: netns\ntree: tree\negress: "+posture+"\nmanager:\n  allow_ports: [8080, 7443]\nbroker:\n  llm_auth: api-key\n  api_key_file: key\n"), 0o644)
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_STATE_DIR", filepath.Join(t.TempDir(), "state"))
	return cfg
}

// TestEgressPlanOffline: with --alias-v4/--alias-v6 the plan needs no guest and prints the
// restore inputs in commit order (jumps, then IPv6 chain, then IPv4 chain).
func TestEgressPlanOffline(t *testing.T) {
	cfg := egressConfig(t, "closed")
	var out, errb bytes.Buffer
	if code := Main([]string{"egress", "plan", "-c", cfg, "--alias-v4", "10.1.2.3", "--alias-v6", "fd00::3"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	s := out.String()
	order := []string{
		"# posture closed, alias 10.1.2.3 / fd00::3 (flag)",
		"# IPv6: jump first and unique (ip6tables-restore --noflush)",
		"# IPv4: jump first and unique (iptables-restore --noflush)",
		"# IPv6: chain commit (ip6tables-restore --noflush)",
		"-A LEVER_EGRESS -d fd00::3/128 -p tcp -m tcp --dport 7443 -j ACCEPT",
		"# IPv4: chain commit (iptables-restore --noflush)",
		"-A LEVER_EGRESS -d 10.1.2.3/32 -p tcp -m tcp --dport 7443 -j ACCEPT\n-A LEVER_EGRESS -d 10.1.2.3/32 -p tcp -m tcp --dport 8080 -j ACCEPT",
		"-A LEVER_EGRESS -j DROP\nCOMMIT\n",
	}
	last := -1
	for _, o := range order {
		i := strings.Index(s[last+1:], o)
		if i < 0 {
			t.Fatalf("%q missing or out of order in:\n%s", o, s)
		}
		last += 1 + i
	}
}

func TestEgressPlanRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, posture string
		args          []string
		want          string
	}{
		{"bad v4", "open", []string{"--alias-v4", "not-an-ip"}, `--alias-v4 "not-an-ip"`},
		{"v6 given as v4", "open", []string{"--alias-v4", "fd00::1"}, "host alias IPv4 address"},
		{"bad v6", "open", []string{"--alias-v4", "10.0.0.1", "--alias-v6", "x"}, `--alias-v6 "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := egressConfig(t, tc.posture)
			var out, errb bytes.Buffer
			code := Main(append([]string{"egress", "plan", "-c", cfg}, tc.args...), &out, &errb)
			if code != 2 || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q, want 2 and %q", code, errb.String(), tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed a plan despite the error: %s", out.String())
			}
		})
	}
}
