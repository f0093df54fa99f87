package brokerctl

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// testClock is a broker clock the test moves forward: expiry without waiting for it.
type testClock struct{ off atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *testClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// keptClient is one client certificate on one connection that is kept alive (HTTP/1.1
// keep-alive or HTTP/2); do reports whether each request reused it.
type keptClient struct {
	t  *testing.T
	c  *http.Client
	h2 bool
}

func newKeptClient(t *testing.T, h *harness, cert tls.Certificate, h2 bool) *keptClient {
	tc := &tls.Config{RootCAs: h.srv.CA.Pool(), MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	if !h2 {
		tc.NextProtos = []string{"http/1.1"}
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: h2, MaxConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	return &keptClient{t: t, c: &http.Client{Transport: tr, Timeout: 20 * time.Second}, h2: h2}
}

func (k *keptClient) do(method, url, body string) (code int, text string, reused bool, err error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}))
	resp, err := k.c.Do(req)
	if err != nil {
		return 0, "", reused, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if k.h2 && resp.ProtoMajor != 2 {
		k.t.Fatalf("control: %s answered over %s, want HTTP/2", url, resp.Proto)
	}
	return resp.StatusCode, string(b), reused, nil
}

func renewBody(t *testing.T, agent string) string {
	_, csrPEM, err := ca.NewKeyAndCSR(agent)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(RenewRequest{CSR: string(csrPEM)})
	return string(b)
}

// TestExpiredCertOnKeptAliveConnection: a certificate that expires after its handshake is
// refused on the next request over the same connection (HTTP/1.1 keep-alive and HTTP/2),
// on every route, /renew included, and a new handshake with it fails. The idle sweep is
// turned off (ConnCheckEvery an hour) so the request itself meets the expiry. Controls:
// the same connection answered 200 before the clock moved, the refused request really
// rode that connection (trace), and another agent's certificate, still valid, keeps
// working on its own kept-alive connection after the clock moved (a /renew included).
func TestExpiredCertOnKeptAliveConnection(t *testing.T) {
	// ok is what the valid certificate gets on the route (the control).
	routes := []struct {
		method, path string
		ok           int
	}{{"GET", "/healthz", 200}, {"GET", "/llm/v1/models", 200}, {"POST", "/renew", 200}, {"POST", "/enrol", 400}, {"GET", "/nope", 404}}
	for _, h2 := range []bool{false, true} {
		for _, rt := range routes {
			name := map[bool]string{false: "http1.1", true: "h2"}[h2] + rt.path
			t.Run(name, func(t *testing.T) {
				clk := &testClock{}
				h := newHarness(t, nil, func(o *Options) { o.Now, o.ConnCheckEvery = clk.Now, time.Hour })
				c1 := issueClient(t, caDir(h.state), "w1", clk.Now(), time.Hour)
				short := newKeptClient(t, h, c1, h2)
				long := newKeptClient(t, h, issueClient(t, caDir(h.state), "w2", clk.Now(), 24*time.Hour), h2)
				for _, k := range []*keptClient{short, long} {
					if code, body, _, err := k.do("GET", h.url+"/healthz", ""); err != nil || code != 200 {
						t.Fatalf("control before the clock moved: %d %s %v", code, body, err)
					}
				}
				clk.advance(2 * time.Hour)
				// Each client its own body, built for its own agent: a CSR is base64, so
				// rewriting one agent name into another inside it could corrupt the request.
				bodyFor := func(agent string) string {
					switch rt.path {
					case "/renew":
						return renewBody(t, agent)
					case "/enrol":
						return `{"agent":"` + agent + `","ticket":"lvt_x","csr":"x"}`
					}
					return ""
				}
				body := bodyFor("w1")
				code, text, reused, err := short.do(rt.method, h.url+rt.path, body)
				if err != nil {
					t.Fatalf("expired certificate: %v (want a 401 answer on the kept-alive connection)", err)
				}
				if !reused {
					t.Fatal("the request after the expiry did not reuse the connection; the test proves nothing")
				}
				if code != http.StatusUnauthorized || !strings.Contains(text, "expired at") {
					t.Errorf("expired certificate on a kept-alive connection, %s %s: %d %s, want 401 naming the expiry", rt.method, rt.path, code, text)
				}
				// A new handshake with it fails: it is still valid on the real clock, so this
				// shows the broker's clock reaches crypto/tls.
				fresh := newKeptClient(t, h, c1, false)
				if code, _, _, err := fresh.do("GET", h.url+"/healthz", ""); err == nil {
					t.Errorf("a new handshake with an expired certificate was answered %d", code)
				}
				// Control: the valid certificate keeps working on its same connection.
				code, text, reused, err = long.do(rt.method, h.url+rt.path, bodyFor("w2"))
				if err != nil || code != rt.ok || !reused {
					t.Errorf("control: valid certificate after the clock moved, %s %s: %d %s reused=%v %v", rt.method, rt.path, code, text, reused, err)
				}
			})
		}
	}
}

// rawConn is one HTTP/1.1 connection with a client certificate, driven by hand so the
// test sees exactly when the broker closes it.
type rawConn struct {
	c  *tls.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, h *harness, cert *tls.Certificate) (*rawConn, error) {
	tc := &tls.Config{RootCAs: h.srv.CA.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", h.srv.JailAddr(), tc)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{c: c, br: bufio.NewReader(c)}, nil
}

// get sends GET path and returns the status (an error when the connection is gone).
func (r *rawConn) get(path string) (int, error) {
	r.c.SetDeadline(time.Now().Add(20 * time.Second))
	defer r.c.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(r.c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// closedByPeer waits (up to wait) for the broker to close the connection.
func (r *rawConn) closedByPeer(wait time.Duration) bool {
	r.c.SetReadDeadline(time.Now().Add(wait))
	defer r.c.SetReadDeadline(time.Time{})
	_, err := r.br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestRevokedOrExpiredCertLosesItsConnections: a certificate revoked or expired after its
// handshake loses its idle connections within the sweep (no slot held until the idle
// timeout), and a new handshake with it is refused, with an audit line for each. Controls:
// its connection answered 200 before, and another agent's idle connection, opened the same
// way, is still open and answers afterwards.
func TestRevokedOrExpiredCertLosesItsConnections(t *testing.T) {
	rows := []struct {
		name    string
		lose    func(h *harness, clk *testClock)
		hsAudit string
	}{
		{"revoked", func(h *harness, _ *testClock) {
			adm := &Admin{Addr: h.srv.AdminAddr(), Token: h.srv.adminToken}
			if _, err := adm.Revoke(context.Background(), RevokeRequest{Agent: "w1"}); err != nil {
				t.Fatal(err)
			}
		}, "is revoked"},
		{"expired", func(_ *harness, clk *testClock) { clk.advance(2 * time.Hour) }, "expired"},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			clk := &testClock{}
			h := newHarness(t, nil, func(o *Options) { o.Now, o.ConnCheckEvery = clk.Now, 50*time.Millisecond })
			c1 := issueClient(t, caDir(h.state), "w1", clk.Now(), time.Hour)
			c2 := issueClient(t, caDir(h.state), "w2", clk.Now(), 24*time.Hour)
			r1, err := dialRaw(t, h, &c1)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := dialRaw(t, h, &c2)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range []*rawConn{r1, r2} {
				if code, err := r.get("/healthz"); err != nil || code != 200 {
					t.Fatalf("control: %d %v", code, err)
				}
			}
			rw.lose(h, clk)
			if !r1.closedByPeer(20 * time.Second) {
				t.Fatalf("%s certificate's idle connection still open 20 s later", rw.name)
			}
			if code, err := r2.get("/healthz"); err != nil || code != 200 {
				t.Errorf("control: the valid agent's idle connection: %d %v", code, err)
			}
			// A new handshake is refused: the request fails, no answer.
			if r, err := dialRaw(t, h, &c1); err == nil {
				if code, err := r.get("/healthz"); err == nil {
					t.Errorf("new connection with the %s certificate answered %d", rw.name, code)
				}
			}
			// The sweep writes its audit line after it closed the connection: wait for it
			// (polled) before the broker stops, or the line can be cut off by the shutdown.
			var audit []byte
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				audit, _ = os.ReadFile(auditPath(h.state))
				if strings.Contains(string(audit), `"route":"connection","outcome":"closed"`) && strings.Contains(string(audit), rw.hsAudit) {
					break
				}
			}
			h.srv.Shutdown(context.Background())
			audit, _ = os.ReadFile(auditPath(h.state))
			for _, want := range []string{`"route":"connection","outcome":"closed"`, rw.hsAudit} {
				if !strings.Contains(string(audit), want) {
					t.Errorf("audit lacks %q:\n%s", want, audit)
				}
			}
		})
	}
}

// handshakeRefusal opens a connection with cert and waits for the broker's verdict on
// the handshake without sending anything (so no unread request turns the broker's alert
// into a reset): the alert it sends ("remote error: tls: bad certificate"), or nil when
// the broker accepted the connection and waits for a request.
func handshakeRefusal(t testing.TB, h *harness, cert *tls.Certificate) error {
	t.Helper()
	tc := &tls.Config{RootCAs: h.srv.CA.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}, Certificates: []tls.Certificate{*cert}}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", h.srv.JailAddr(), tc)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err == nil {
		return errors.New("the broker sent data unasked")
	}
	return err
}

// refusedAtHandshake says whether a client call's error is a refused handshake (what a
// revoked or expired certificate now meets instead of a 403), as the client sees it.
func refusedAtHandshake(err error) bool {
	if err == nil {
		return false
	}
	for _, s := range []string{"bad certificate", "broken pipe", "connection reset", "could not be established", "EOF"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// wantRevokedAtHandshake fails t unless a new connection with cert is refused at the
// handshake, with the alert crypto/tls sends for a refused client certificate.
func wantRevokedAtHandshake(t testing.TB, h *harness, cert *tls.Certificate, what string) {
	t.Helper()
	if err := handshakeRefusal(t, h, cert); err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("%s: new handshake %v, want it refused (bad certificate)", what, err)
	}
}

// TestExpiryCutsStreamsInFlight: a model answer streaming when its certificate expires is
// cut (the in-flight watcher checks expiry as well as revocation), while another agent's
// stream, whose certificate is still valid, goes on (the control). The audit line names
// the expiry.
func TestExpiryCutsStreamsInFlight(t *testing.T) {
	clk := &testClock{}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 400; i++ {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
		}
	}), func(o *Options) { o.Now, o.LLMRoutes = clk.Now, []string{"GET /v1/models"} })
	type stream struct {
		events chan struct{}
		ended  chan struct{}
	}
	open := func(agent string, ttl time.Duration) stream {
		cert := issueClient(t, caDir(h.state), agent, clk.Now(), ttl)
		resp, err := clientFor(h.srv.CA.Pool(), &cert, true).Get(h.url + "/llm/v1/models")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", agent, err, resp)
		}
		s := stream{events: make(chan struct{}, 1000), ended: make(chan struct{})}
		go func() {
			defer resp.Body.Close()
			defer close(s.ended)
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if strings.HasPrefix(line, "data:") {
					s.events <- struct{}{}
				}
			}
		}()
		return s
	}
	short, long := open("w1", time.Hour), open("w2", 24*time.Hour)
	for _, s := range []stream{short, long} {
		select {
		case <-s.events:
		case <-time.After(10 * time.Second):
			t.Fatal("control: no event before the clock moved")
		}
	}
	clk.advance(2 * time.Hour)
	select {
	case <-short.ended:
	case <-time.After(15 * time.Second):
		t.Fatal("w1's stream still runs 15 s after its certificate expired")
	}
	for len(long.events) > 0 {
		<-long.events
	}
	select {
	case <-long.events:
	case <-long.ended:
		t.Fatal("control: w2's stream ended too")
	case <-time.After(10 * time.Second):
		t.Fatal("control: w2's stream stopped flowing")
	}
	// w1's line was written when its handler returned; w2's stream need not finish.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h.srv.Shutdown(ctx)
	audit, _ := os.ReadFile(auditPath(h.state))
	if !strings.Contains(string(audit), "client certificate expired while the request was in flight; response cut") {
		t.Errorf("audit does not name the expiry:\n%s", audit)
	}
}
