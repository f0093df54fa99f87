package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/doctor"
)

// writeCA writes a self-signed CA certificate ending at end where the broker keeps its CA.
func writeCA(t *testing.T, stateDir string, end time.Time) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "lever test CA"}, NotBefore: end.AddDate(-1, 0, 0), NotAfter: end, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(stateDir, "ca"), 0o700)
	os.WriteFile(filepath.Join(stateDir, "ca", "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// TestDoctorCommand runs lever doctor as a user types it, on this machine: the report's
// schema, its checks against what this host really has (podman, shellcheck), a jail's CA
// expired turning into a blocker and exit 1 (its valid twin the control), a lever.yaml
// that does not load a blocker, a -c file that is not there refused (exit 2), lever.yaml
// found upward like every jail command finds it, and none at all skipping the jail's checks.
func TestDoctorCommand(t *testing.T) {
	t.Setenv("LEVER_DEV_NETNS", "1")
	state := t.TempDir()
	t.Setenv("LEVER_STATE_DIR", state)
	proj := t.TempDir()
	cfg := filepath.Join(proj, "lever.yaml")
	os.WriteFile(cfg, []byte("name: doc\nbackend: netns\nbroker:\n  llm_auth: subscription\n"), 0o644)
	bad := filepath.Join(proj, "bad.yaml")
	os.WriteFile(bad, []byte("name: doc\nbakend: netns\n"), 0o644)
	run := func(args ...string) (int, doctor.Report, string) {
		t.Helper()
		code, out, errs := lever(append([]string{"doctor", "--json"}, args...)...)
		var r doctor.Report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("doctor --json %v: exit %d, not JSON (%v):\n%s\n%s", args, code, err, out, errs)
		}
		return code, r, errs
	}
	check := func(r doctor.Report, id string) doctor.Check {
		for _, c := range r.Checks {
			if c.ID == id {
				return c
			}
		}
		return doctor.Check{}
	}
	cases := []struct {
		name   string
		caEnd  time.Time
		args   []string
		id     string
		status doctor.Status
		detail string
	}{
		{"expired CA is a blocker", time.Now().Add(-time.Hour), []string{"-c", cfg}, "broker ca", doctor.Blocker, "expired"},
		{"control: a valid CA", time.Now().AddDate(5, 0, 0), []string{"-c", cfg}, "broker ca", doctor.OK, "valid until"},
		{"a lever.yaml that does not load", time.Time{}, []string{"-c", bad}, "config", doctor.Blocker, "bakend"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.caEnd.IsZero() {
				writeCA(t, filepath.Join(state, "doc"), tc.caEnd)
			}
			code, r, errs := run(tc.args...)
			c := check(r, tc.id)
			if c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) {
				t.Errorf("%s: %+v, want %s ~%q\n%s", tc.id, c, tc.status, tc.detail, errs)
			}
			if r.Schema != 1 {
				t.Errorf("schema %d", r.Schema)
			}
			if want := map[bool]int{true: 1, false: 0}[r.Blockers > 0]; code != want {
				t.Errorf("exit %d with %d blockers, want %d", code, r.Blockers, want)
			}
			if tc.status == doctor.Blocker && code != 1 {
				t.Errorf("a blocker, exit %d", code)
			}
			// this machine's own tools, as they are
			for _, tool := range []string{"podman", "shellcheck"} {
				_, err := exec.LookPath(tool)
				if got := check(r, tool).Status; (err == nil) != (got == doctor.OK) {
					t.Errorf("%s on PATH: %v; doctor says %s", tool, err == nil, got)
				}
			}
		})
	}

	// A -c file that is not there is bad input: exit 2 naming it, no report.
	missing := filepath.Join(proj, "none.yaml")
	if code, out, errs := lever("doctor", "-c", missing); code != 2 || out != "" || !strings.Contains(errs, missing) {
		t.Errorf("doctor -c %s: exit %d, stdout %q, stderr %q; want 2 naming it", missing, code, out, errs)
	}
	// Found upward, as every jail command finds it: the jail's checks run.
	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) })
	sub := filepath.Join(proj, "src", "pkg")
	os.MkdirAll(sub, 0o755)
	os.Chdir(sub)
	if _, r, _ := run(); check(r, "config").Detail != cfg+": jail doc on backend netns" || check(r, "broker ca").ID == "" {
		t.Errorf("lever.yaml found upward: %+v, broker ca %+v", check(r, "config"), check(r, "broker ca"))
	}
	// No lever.yaml here or above: the host's checks only.
	os.Chdir(t.TempDir())
	_, r, _ := run()
	if c := check(r, "config"); c.Status != doctor.OK || !strings.Contains(c.Detail, "no lever.yaml here or in a directory above") {
		t.Errorf("config without a lever.yaml: %+v", c)
	}
	if c := check(r, "broker ca"); c.ID != "" {
		t.Errorf("a jail check ran without a lever.yaml: %+v", c)
	}
	// The text form: a line per check and the summary.
	code, out, _ := lever("doctor")
	if !strings.Contains(out, "ok       config: no lever.yaml here or in a directory above") || !strings.Contains(out, "lever doctor: ") || (code == 1) != (r.Blockers > 0) {
		t.Errorf("text: exit %d:\n%s", code, out)
	}
}
