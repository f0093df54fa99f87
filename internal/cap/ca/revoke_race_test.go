package ca

import (
	"crypto/x509"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func newTestCSR(t testing.TB) *x509.CertificateRequest {
	t.Helper()
	_, csrPEM, err := NewKeyAndCSR("ignored")
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ParseCSRPEM(csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

// TestRevokeAgentRefusesIssuanceAuthorisedBefore replays the /renew race deterministically:
// the broker's peer check has passed on cur, the agent is revoked by name, then the CA is
// asked to issue. Every issuance authorised by something older than the revocation must
// be refused; a ticket made after it re-enrols the agent.
func TestRevokeAgentRefusesIssuanceAuthorisedBefore(t *testing.T) {
	c, err := LoadOrCreate(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c.Now = func() time.Time { return now }
	tick := func() { now = now.Add(1500 * time.Millisecond) }

	_, cur, err := c.IssueClient(newTestCSR(t), "w1", RoleWorker, time.Hour) // passed the peer check
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := c.IssueClient(newTestCSR(t), "w2", RoleWorker, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tick()
	ticketBefore := now // a ticket made before the revocation, still pending
	tick()
	if _, err := c.RevokeAgent("w1"); err != nil { // the admin's revoke lands here
		t.Fatal(err)
	}
	tick()
	ticketAfter := now

	var reenrolled *x509.Certificate
	for _, tc := range []struct {
		name    string
		issue   func() (*x509.Certificate, error)
		refused bool
	}{
		{"renew with the certificate that passed the peer check", func() (*x509.Certificate, error) {
			_, l, err := c.RenewClient(newTestCSR(t), cur, time.Hour)
			return l, err
		}, true},
		{"plain issue for the agent", func() (*x509.Certificate, error) {
			_, l, err := c.IssueClient(newTestCSR(t), "w1", RoleWorker, time.Hour)
			return l, err
		}, true},
		{"enrol with a ticket made before the revocation", func() (*x509.Certificate, error) {
			_, l, err := c.EnrolClient(newTestCSR(t), "w1", RoleWorker, time.Hour, ticketBefore)
			return l, err
		}, true},
		{"enrol with a ticket made at the revocation's instant", func() (*x509.Certificate, error) {
			_, l, err := c.EnrolClient(newTestCSR(t), "w1", RoleWorker, time.Hour, ticketAfter.Add(-1500*time.Millisecond))
			return l, err
		}, true},
		{"another agent renews", func() (*x509.Certificate, error) {
			_, l, err := c.RenewClient(newTestCSR(t), other, time.Hour)
			return l, err
		}, false},
		{"enrol with a ticket made after the revocation", func() (*x509.Certificate, error) {
			tick()
			_, l, err := c.EnrolClient(newTestCSR(t), "w1", RoleWorker, time.Hour, ticketAfter)
			reenrolled = l
			return l, err
		}, false},
		{"renew the re-enrolled certificate", func() (*x509.Certificate, error) {
			tick()
			_, l, err := c.RenewClient(newTestCSR(t), reenrolled, time.Hour)
			return l, err
		}, false},
		{"renew the pre-revocation certificate after re-enrolment", func() (*x509.Certificate, error) {
			_, l, err := c.RenewClient(newTestCSR(t), cur, time.Hour)
			return l, err
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaf, err := tc.issue()
			if tc.refused {
				if !errors.Is(err, ErrRevoked) || leaf != nil {
					t.Fatalf("issued %v, err %v; want refusal wrapping ErrRevoked", leaf != nil, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if r, err := c.IsRevoked(leaf); err != nil || r {
				t.Fatalf("fresh certificate revoked=%v err=%v", r, err)
			}
		})
	}

	// The mark is durable: a broker restarted on the same directory still refuses.
	c2, err := Load(c.Dir())
	if err != nil {
		t.Fatal(err)
	}
	c2.Now = c.Now
	if _, _, err := c2.RenewClient(newTestCSR(t), cur, time.Hour); !errors.Is(err, ErrRevoked) {
		t.Fatalf("after reload, renewal of a revoked agent's certificate: %v", err)
	}
}

// TestRenewAfterSerialRevocationRefused: the same window for a revocation by serial.
func TestRenewAfterSerialRevocationRefused(t *testing.T) {
	c, err := LoadOrCreate(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	_, cur, err := c.IssueClient(newTestCSR(t), "w1", RoleWorker, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RevokeSerial(SerialHex(cur.SerialNumber)); err != nil {
		t.Fatal(err)
	}
	if _, l, err := c.RenewClient(newTestCSR(t), cur, time.Hour); !errors.Is(err, ErrRevoked) || l != nil {
		t.Fatalf("renewed a certificate revoked by serial: %v", err)
	}
}

// TestRevokeAgentDuringConcurrentRenewals runs renewals against a revocation for real:
// whatever the interleaving, no certificate of the agent may be left unrevoked, and every
// renewal after the revocation is refused.
func TestRevokeAgentDuringConcurrentRenewals(t *testing.T) {
	c, err := LoadOrCreate(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	_, seed, err := c.IssueClient(newTestCSR(t), "w1", RoleWorker, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 4, 15
	csrs := make([]*x509.CertificateRequest, workers*rounds)
	for i := range csrs {
		csrs[i] = newTestCSR(t)
	}
	var (
		mu      sync.Mutex
		minted  []*x509.Certificate
		refused int
		wg      sync.WaitGroup
	)
	start, first := make(chan struct{}), make(chan struct{})
	var once sync.Once
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-start
			for i := 0; i < rounds; i++ {
				_, leaf, err := c.RenewClient(csrs[w*rounds+i], seed, time.Hour)
				mu.Lock()
				switch {
				case err == nil:
					minted = append(minted, leaf)
					once.Do(func() { close(first) })
				case errors.Is(err, ErrRevoked):
					refused++
				default:
					t.Errorf("renew: %v", err)
					once.Do(func() { close(first) })
				}
				mu.Unlock()
			}
		}(w)
	}
	close(start)
	// Revoke while renewals are in flight, after at least one has minted, so both sides
	// of the race are exercised.
	<-first
	if _, err := c.RevokeAgent("w1"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, l := range append(minted, seed) {
		if r, err := c.IsRevoked(l); err != nil || !r {
			t.Errorf("certificate %s of a revoked agent is live (revoked=%v err=%v)", SerialHex(l.SerialNumber), r, err)
		}
	}
	if _, _, err := c.RenewClient(newTestCSR(t), seed, time.Hour); !errors.Is(err, ErrRevoked) {
		t.Fatalf("renewal after the revocation: %v", err)
	}
	t.Logf("renewals: %d minted before the revocation (all revoked), %d refused", len(minted), refused)
}

// RenewClient retires the certificate it renews, in the same registry write: the old one
// is revoked once (and only once) the successor exists, and cannot renew again.
func TestRenewRetiresPredecessor(t *testing.T) {
	c, err := LoadOrCreate(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	_, cur, err := c.IssueClient(newTestCSR(t), "w1", RoleWorker, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// A renewal that fails to sign (a CSR with a bad signature) leaves cur working.
	bad := newTestCSR(t)
	bad.Signature = append([]byte(nil), bad.Signature...)
	bad.Signature[len(bad.Signature)-1] ^= 0xff
	if _, _, err := c.RenewClient(bad, cur, time.Hour); err == nil {
		t.Fatal("renewed with a broken CSR")
	}
	if rev, _ := c.IsRevoked(cur); rev {
		t.Fatal("a failed renewal retired the certificate")
	}
	_, next, err := c.RenewClient(newTestCSR(t), cur, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if rev, _ := c.IsRevoked(cur); !rev {
		t.Error("renewed certificate still valid")
	}
	if rev, _ := c.IsRevoked(next); rev {
		t.Error("successor revoked")
	}
	if _, _, err := c.RenewClient(newTestCSR(t), cur, time.Hour); !errors.Is(err, ErrRevoked) {
		t.Errorf("second renewal of a retired certificate: %v", err)
	}
}
