package brokerctl

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
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
			// The sweep that closes a revoked certificate's idle connections is off here, so
			// the request itself meets the revocation (TestRevokedOrExpiredCertLosesItsConnections
			// covers the sweep).
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

// TestRevocationCutsStreamsInFlight: a model answer already streaming when its agent's
// certificate is revoked is cut within about a second (the admin revocation also triggers
// an immediate re-check), while another agent's stream on the same broker goes on (the
// control). The audit line names the revocation.
func TestRevocationCutsStreamsInFlight(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 120; i++ {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
		}
	}), func(o *Options) { o.LLMRoutes = []string{"GET /v1/models"} })
	ctx := context.Background()
	adm := &Admin{Addr: h.srv.AdminAddr(), Token: h.srv.adminToken}
	type stream struct {
		events chan struct{}
		ended  chan time.Time
	}
	open := func(agent string) stream {
		tok, err := adm.Ticket(ctx, agent, ca.RoleWorker, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err := Enrol(ctx, h.url, h.srv.CA.CertPEM, agent, tok)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := tls.X509KeyPair(certPEM, keyPEM)
		c := clientFor(h.srv.CA.Pool(), &cert, true)
		resp, err := c.Get(h.url + "/llm/v1/models")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", agent, err, resp)
		}
		s := stream{events: make(chan struct{}, 1000), ended: make(chan time.Time, 1)}
		go func() {
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					s.ended <- time.Now()
					return
				}
				if strings.HasPrefix(line, "data:") {
					s.events <- struct{}{}
				}
			}
		}()
		return s
	}
	w1, w2 := open("w1"), open("w2")
	for _, s := range []stream{w1, w2} {
		select {
		case <-s.events:
		case <-time.After(5 * time.Second):
			t.Fatal("control: no event before the revocation")
		}
	}
	revoked := time.Now()
	if _, err := adm.Revoke(ctx, RevokeRequest{Agent: "w1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-w1.ended:
		t.Logf("w1's stream ended %v after the revocation", at.Sub(revoked).Round(time.Millisecond))
	case <-time.After(3 * time.Second):
		t.Fatal("w1's stream still runs 3 s after its certificate was revoked")
	}
	// Control: the other agent's stream is untouched.
	for len(w2.events) > 0 {
		<-w2.events
	}
	select {
	case <-w2.events:
	case at := <-w2.ended:
		t.Fatalf("w2's stream ended too (%v after the revocation)", at.Sub(revoked))
	case <-time.After(3 * time.Second):
		t.Fatal("w2's stream stopped flowing")
	}
	time.Sleep(200 * time.Millisecond)
	h.srv.Shutdown(ctx)
	audit, _ := os.ReadFile(auditPath(h.state))
	if !strings.Contains(string(audit), "client certificate revoked while the request was in flight; response cut") {
		t.Errorf("audit does not name the revocation:\n%s", audit)
	}
}
