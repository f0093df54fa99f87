package ca

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadOrCreateModesAndReload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	c, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, KeyFile): 0o600} {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", name, st.Mode().Perm(), want)
		}
	}
	c2, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Fingerprint() != c.Fingerprint() {
		t.Fatal("reload made a new CA instead of loading the existing one")
	}
}

func TestLoadRefusesBadKeyFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  os.FileMode
		edit  func(t *testing.T, dir string)
		wants []string
	}{
		{"group-readable", 0o640, nil, []string{KeyFile, "0640", "0600"}},
		{"world-readable", 0o644, nil, []string{KeyFile, "0644"}},
		{"other CA's key", 0o600, func(t *testing.T, dir string) {
			other, err := LoadOrCreate(filepath.Join(t.TempDir(), "other"))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(filepath.Join(other.Dir(), KeyFile))
			if err := os.WriteFile(filepath.Join(dir, KeyFile), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{"does not match"}},
		// The key file read through a symlink: the link is refused, not followed, even to a
		// good key (the other rows' control is the CA loaded before the edit).
		{"symlinked key", 0o600, func(t *testing.T, dir string) {
			key := filepath.Join(dir, KeyFile)
			moved := filepath.Join(t.TempDir(), "moved.key")
			if err := os.Rename(key, moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, key); err != nil {
				t.Fatal(err)
			}
		}, []string{KeyFile, "symbolic link"}},
		{"key without cert", 0o600, func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, CertFile)) }, []string{CertFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ca")
			if _, err := LoadOrCreate(dir); err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				tc.edit(t, dir)
			}
			if err := os.Chmod(filepath.Join(dir, KeyFile), tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err := LoadOrCreate(dir)
			if err == nil {
				t.Fatal("loaded a CA with a bad key file")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestServerCertSANs(t *testing.T) {
	c, err := LoadOrCreate(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	ip := net.ParseIP("198.18.7.9")
	cert, err := c.IssueServerCertSANs([]string{"host.orb.internal"}, []net.IP{ip}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"host.orb.internal", true},
		{"198.18.7.9", true},
		{"198.18.7.10", false},
		{"host.lima.internal", false},
	} {
		_, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: tc.host, Roots: c.Pool()})
		if (err == nil) != tc.ok {
			t.Errorf("verify as %s: err=%v, want ok=%v", tc.host, err, tc.ok)
		}
	}
	if _, err := c.IssueServerCertSANs(nil, nil, time.Hour); err == nil {
		t.Error("issued a server certificate with no SAN")
	}
}

func TestClientCertRevocation(t *testing.T) {
	c, err := LoadOrCreate(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	issue := func(agent string) *x509.Certificate {
		_, csrPEM, err := NewKeyAndCSR("ignored-cn")
		if err != nil {
			t.Fatal(err)
		}
		csr, err := ParseCSRPEM(csrPEM)
		if err != nil {
			t.Fatal(err)
		}
		_, leaf, err := c.IssueClient(csr, agent, RoleWorker, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if leaf.Subject.CommonName != agent {
			t.Fatalf("CN %q: identity must come from the issuer, not the CSR", leaf.Subject.CommonName)
		}
		return leaf
	}
	a1, a2, b := issue("w1"), issue("w1"), issue("w2")
	if _, err := c.RevokeSerial(SerialHex(a1.SerialNumber)); err != nil {
		t.Fatal(err)
	}
	check := func(cert *x509.Certificate, want bool) {
		t.Helper()
		got, err := c.IsRevoked(cert)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s/%s revoked=%v, want %v", cert.Subject.CommonName, SerialHex(cert.SerialNumber), got, want)
		}
	}
	check(a1, true)
	check(a2, false)
	serials, err := c.RevokeAgent("w1")
	if err != nil || len(serials) != 2 {
		t.Fatalf("RevokeAgent: %v %v", serials, err)
	}
	check(a2, true)
	check(b, false)
	// A second process sees revocations through the file.
	c2, err := Load(c.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := c2.IsRevoked(a2); !r {
		t.Error("revocation did not survive a reload")
	}
	if _, err := c.RevokeSerial("deadbeef"); err == nil {
		t.Error("revoking an unknown serial succeeded")
	}
	if _, err := c.RevokeAgent("nobody"); err == nil {
		t.Error("revoking an agent with no certificate succeeded")
	}
}

func TestServerCertSourceKeepsCachedOnFailure(t *testing.T) {
	c, err := LoadOrCreate(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c.Now = func() time.Time { return now }
	s, err := NewServerCertSource(c, []string{"broker.test"}, nil, 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	first := s.Current()
	// Not due yet: nothing happens.
	if err := s.Refresh(false); err != nil || s.Current() != first {
		t.Fatal("re-issued before due")
	}
	// Move into the renewal window with a failing issuer.
	now = now.Add(2*time.Hour + time.Minute)
	good := s.Issue
	s.Issue = func() (*tls.Certificate, error) { return nil, errors.New("disk full") }
	err = s.Refresh(false)
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "still serving") {
		t.Fatalf("failing re-issue: %v", err)
	}
	if got, _ := s.GetCertificate(nil); got != first {
		t.Fatal("lost the cached certificate after a failed re-issue")
	}
	// Retry is rate-limited, then succeeds once the issuer works.
	s.Issue = good
	if err := s.Refresh(false); err != nil || s.Current() != first {
		t.Fatal("retried before RetryEvery")
	}
	now = now.Add(2 * time.Minute)
	if err := s.Refresh(false); err != nil {
		t.Fatal(err)
	}
	if s.Current() == first || !s.Current().Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Fatal("did not re-issue once due")
	}
	re, fails, _ := s.Stats()
	if re != 1 || fails != 1 {
		t.Errorf("stats reissues=%d failures=%d, want 1 1", re, fails)
	}
}
