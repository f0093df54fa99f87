package brokerctl

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// TestRevokedCertCannotResumeSession: a client that keeps TLS sessions (brokerclient's
// and lev's configurations do, for speed) cannot carry a revoked certificate into a new
// connection by resuming a session whose ticket was issued before the revocation. The
// controls: the same client's second connection resumes (DidResume) and is served, so the
// attack really offers a ticket the broker accepts for a live certificate.
func TestRevokedCertCannotResumeSession(t *testing.T) {
	// The sweep is off so only the handshake and the request checks can refuse.
	h := newHarness(t, nil, func(o *Options) { o.ConnCheckEvery = time.Hour })
	ctx := context.Background()
	adm := &Admin{Addr: h.srv.AdminAddr(), Token: h.srv.adminToken}
	tok, err := adm.Ticket(ctx, "w1", ca.RoleWorker, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := Enrol(ctx, h.url, h.srv.CA.CertPEM, "w1", tok)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := ClientTLSConfig(h.srv.CA.CertPEM, certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if tc.ClientSessionCache == nil {
		t.Fatal("ClientTLSConfig keeps no session cache; the resumption this test attacks is not what clients do")
	}
	tc.NextProtos = []string{"http/1.1"}
	var resumed []bool
	tc.VerifyConnection = func(cs tls.ConnectionState) error { resumed = append(resumed, cs.DidResume); return nil }
	// A new connection for every request: each one is a handshake, full or resumed.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
	do := func() (int, error) {
		resp, err := c.Get(h.url + "/llm/v1/models")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	for i := 0; i < 2; i++ {
		if code, err := do(); err != nil || code != http.StatusOK {
			t.Fatalf("control request %d: %d %v", i, code, err)
		}
	}
	if len(resumed) != 2 || resumed[0] || !resumed[1] {
		t.Fatalf("control: handshakes resumed %v, want [false true] (the second connection must resume)", resumed)
	}
	if _, err := adm.Revoke(ctx, RevokeRequest{Agent: "w1"}); err != nil {
		t.Fatal(err)
	}
	code, err := do()
	if err == nil && code != http.StatusForbidden {
		t.Fatalf("revoked certificate over a resumed session: %d, want a refused handshake or 403", code)
	}
	t.Logf("after revocation: status %d, error %v, handshakes resumed %v", code, err, resumed)
	if err == nil {
		t.Fatal("the revoked certificate completed a handshake; it must never hold a connection (verifyPeer)")
	}
}
