package brokerctl

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// TestRenewRacingRevocation lands an admin revocation of the agent exactly between
// /renew's peer check and issuance, over real TLS and the real admin API. Before the fix
// the renewal minted a fresh, unrevoked certificate and the agent survived its revocation.
func TestRenewRacingRevocation(t *testing.T) {
	h := newHarness(t, nil, nil)
	ctx := context.Background()
	caPEM := h.srv.CA.CertPEM
	adm := &Admin{Addr: h.srv.AdminAddr(), Token: h.srv.adminToken}
	ticketFor := func(agent string) string {
		tok, err := adm.Ticket(ctx, agent, ca.RoleWorker, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	certPEM, keyPEM, err := Enrol(ctx, h.url, caPEM, "w1", ticketFor("w1"))
	if err != nil {
		t.Fatal(err)
	}
	pending := ticketFor("w1") // made before the revocation, never redeemed
	var once sync.Once
	var revokeErr error
	h.srv.beforeIssue = func(agent string) {
		once.Do(func() { _, revokeErr = adm.Revoke(ctx, RevokeRequest{Agent: agent}) })
	}
	_, _, err = Renew(ctx, h.url, caPEM, certPEM, keyPEM)
	if revokeErr != nil {
		t.Fatalf("revoking inside the window: %v", revokeErr)
	}
	if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("renewal racing a revocation: %v; want 403 revoked", err)
	}
	h.srv.beforeIssue = nil

	old, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		viaCert bool
		try     func() error
	}{
		{"renew again after the revocation", true, func() error {
			_, _, err := Renew(ctx, h.url, caPEM, certPEM, keyPEM)
			return err
		}},
		{"enrol with a ticket made before the revocation", false, func() error {
			_, _, err := Enrol(ctx, h.url, caPEM, "w1", pending)
			return err
		}},
		{"healthz with the revoked certificate", true, func() error {
			code, body, err := get(h.client(&old), "GET", h.url+"/healthz", "")
			if err != nil {
				return err
			}
			return fmt.Errorf("%d %s", code, body)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.try()
			// With the revoked certificate, the handshake itself is refused now
			// (conncheck.go); an enrolment, without one, gets the 403.
			if tc.viaCert {
				if !refusedAtHandshake(err) {
					t.Fatalf("got %v, want the handshake refused", err)
				}
				wantRevokedAtHandshake(t, h, &old, tc.name)
				return
			}
			if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "revoked") {
				t.Fatalf("got %v, want 403 revoked", err)
			}
		})
	}

	// Deliberate re-enrolment: a ticket made after the revocation works, and so does
	// renewing the certificate it yields.
	newCert, newKey, err := Enrol(ctx, h.url, caPEM, "w1", ticketFor("w1"))
	if err != nil {
		t.Fatalf("re-enrolment with a new ticket: %v", err)
	}
	renewed, renewedKey, err := Renew(ctx, h.url, caPEM, newCert, newKey)
	if err != nil {
		t.Fatalf("renewing the re-enrolled certificate: %v", err)
	}
	pair, err := tls.X509KeyPair(renewed, renewedKey)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, err := get(h.client(&pair), "GET", h.url+"/healthz", ""); err != nil || code != 200 {
		t.Fatalf("re-enrolled, renewed certificate on /healthz: %d %v", code, err)
	}
}
