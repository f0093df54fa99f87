package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/brokerctl"
	"github.com/lever-jail/lever/internal/cap/ticket"
	"github.com/lever-jail/lever/internal/config"
)

func brokerInstance(t *testing.T) (string, *config.Config) {
	t.Helper()
	proj, _ := filepath.EvalSymlinks(t.TempDir())
	state, _ := filepath.EvalSymlinks(t.TempDir())
	t.Setenv("LEVER_STATE_DIR", state)
	p := filepath.Join(proj, "lever.yaml")
	os.WriteFile(p, []byte("name: bt\nbackend: orbstack\nbroker:\n  llm_auth: subscription\n"), 0o644)
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, cfg
}

func TestBrokerCommands(t *testing.T) {
	p, cfg := brokerInstance(t)
	outside := filepath.Join(t.TempDir(), "ticket")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"status when stopped", []string{"broker", "status", "-c", p}, 1, "broker not running", ""},
		{"stop when stopped", []string{"broker", "stop", "-c", p}, 0, "broker was not running", ""},
		{"ticket to stdout", []string{"broker", "ticket", "-c", p, "--agent", "w1"}, 0, ticket.Prefix, ""},
		{"ticket into the project", []string{"broker", "ticket", "-c", p, "--agent", "w1", "--out", filepath.Join(filepath.Dir(p), "t")}, 2, "", "must never be written into the project tree"},
		{"ticket to a file outside", []string{"broker", "ticket", "-c", p, "--agent", "w2", "--out", outside}, 0, "", ""},
		{"ticket bad agent", []string{"broker", "ticket", "-c", p, "--agent", "Bad Name"}, 2, "", `agent name "Bad Name" is not valid`},
		{"revoke without broker", []string{"broker", "revoke", "-c", p, "--agent", "w1"}, 2, "", "is not running"},
		{"revoke needs one target", []string{"broker", "revoke", "-c", p}, 2, "", "exactly one of --serial or --agent"},
		{"serve refuses non-loopback admin", []string{"broker", "serve", "-c", p, "--admin", "0.0.0.0:7444", "--san-ip", "127.0.0.1"}, 2, "", "is not a loopback address"},
		{"serve refuses a bad SAN IP", []string{"broker", "serve", "-c", p, "--san-ip", "nope"}, 2, "", `--san-ip: "nope" is not an IP address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(tc.args, &out, &errb)
			if code != tc.code || !strings.Contains(out.String(), tc.stdout) || !strings.Contains(errb.String(), tc.stderr) {
				t.Fatalf("exit %d (want %d)\nstdout: %s\nstderr: %s", code, tc.code, out.String(), errb.String())
			}
		})
	}
	// The file ticket is private and redeemable once, by its agent.
	st, err := os.Stat(outside)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("ticket file: %v %v", st, err)
	}
	data, _ := os.ReadFile(outside)
	store, _ := ticket.Open(brokerctl.TicketDir(cfg.StateDir()))
	if _, err := store.Redeem(strings.TrimSpace(string(data)), "w2"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(p), "t")); !os.IsNotExist(err) {
		t.Error("refused ticket was written anyway")
	}
}
