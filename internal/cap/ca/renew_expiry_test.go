package ca

import (
	"crypto/x509"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestRenewClientRefusesExpired: the CA itself refuses to renew a certificate outside its
// validity period on its own clock (whatever let the request that far), and leaves it
// unretired. Control: the same certificate renews while valid.
func TestRenewClientRefusesExpired(t *testing.T) {
	c, err := LoadOrCreate(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	issue := func() *certAndCSR {
		c.Now = func() time.Time { return base }
		_, csrPEM, err := NewKeyAndCSR("w1")
		if err != nil {
			t.Fatal(err)
		}
		csr, _ := ParseCSRPEM(csrPEM)
		_, leaf, err := c.IssueClient(csr, "w1", RoleWorker, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return &certAndCSR{leaf: leaf, csrPEM: csrPEM}
	}
	for _, tc := range []struct {
		name string
		at   time.Duration // CA clock, from issuance
		want error
	}{
		{"valid", 30 * time.Minute, nil},
		{"expired", 2 * time.Hour, ErrExpired},
		{"not yet valid", -time.Hour, ErrExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := issue()
			c.Now = func() time.Time { return base.Add(tc.at) }
			csr, _ := ParseCSRPEM(cur.csrPEM)
			_, _, err := c.RenewClient(csr, cur.leaf, time.Hour)
			if !errors.Is(err, tc.want) {
				t.Fatalf("renewal at +%v: %v, want %v", tc.at, err, tc.want)
			}
			revoked, _ := c.IsRevoked(cur.leaf)
			if revoked != (tc.want == nil) {
				t.Errorf("presented certificate retired=%v after renewal error %v", revoked, err)
			}
		})
	}
}

type certAndCSR struct {
	leaf   *x509.Certificate
	csrPEM []byte
}
