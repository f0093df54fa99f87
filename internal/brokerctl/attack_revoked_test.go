package brokerctl

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// TestRevokedCertOnKeptAliveConnection: revocation takes effect on the next request even
// on a connection whose handshake (with the now-revoked certificate) happened before it,
// over HTTP/1.1 keep-alive and over HTTP/2. The first request on the connection is the
// control (200); the trace proves the second request rode the same connection.
func TestRevokedCertOnKeptAliveConnection(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := map[bool]string{false: "http1.1", true: "h2"}[h2]
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil, nil)
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
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			tc := &tls.Config{RootCAs: h.srv.CA.Pool(), MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
			tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: h2}
			if !h2 {
				tc.NextProtos = []string{"http/1.1"}
			}
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			do := func() (int, bool, string) {
				reused := false
				proto := ""
				req, _ := http.NewRequest("GET", h.url+"/llm/v1/models", nil)
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				proto = resp.Proto
				return resp.StatusCode, reused, proto
			}
			if code, _, proto := do(); code != 200 || (h2 && proto != "HTTP/2.0") {
				t.Fatalf("control: %d over %s", code, proto)
			}
			if _, err := adm.Revoke(ctx, RevokeRequest{Agent: "w1"}); err != nil {
				t.Fatal(err)
			}
			code, reused, _ := do()
			if !reused {
				t.Fatal("the second request did not reuse the connection; the test proves nothing")
			}
			if code != http.StatusForbidden {
				t.Errorf("revoked certificate on a kept-alive connection: %d, want 403", code)
			}
		})
	}
}
