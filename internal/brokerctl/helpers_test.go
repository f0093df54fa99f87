package brokerctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// testKey is the API key every test broker adds. Tests grep for it everywhere it must not be.
const testKey = "sk-lever-test-4f9c2a7e81d04b6f9a3c"

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(&l.b, format+"\n", args...)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type harness struct {
	t        testing.TB
	root     string // parent of state dir; the key file lives here, outside state
	state    string
	keyFile  string
	srv      *Server
	log      *logBuf
	url      string
	upstream *httptest.Server
	seen     *seenHeaders
}

// seenHeaders records the credential headers the fake upstream received.
type seenHeaders struct {
	mu   sync.Mutex
	auth []string
	xkey []string
}

func (s *seenHeaders) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth = append(s.auth, r.Header.Values("Authorization")...)
	s.xkey = append(s.xkey, r.Header.Values("X-Api-Key")...)
}

func writeKey(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "api.key")
	if err := os.WriteFile(p, []byte(testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// newHarness starts a broker on 127.0.0.1:0 whose certificate names 127.0.0.1 (the IP the
// test dials, as an agent dials the alias IP) in front of upstream (nil: a default fake).
func newHarness(t testing.TB, upstream http.Handler, edit func(*Options)) *harness {
	t.Helper()
	return newHarnessTLS(t, upstream, nil, edit)
}

// newHarnessTLS is newHarness with the fake upstream's TLS configuration (nil: httptest's
// own certificate).
func newHarnessTLS(t testing.TB, upstream http.Handler, upTLS *tls.Config, edit func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, root: t.TempDir(), log: &logBuf{}, seen: &seenHeaders{}}
	h.state = filepath.Join(h.root, "state")
	h.keyFile = writeKey(t, h.root)
	if upstream == nil {
		upstream = fakeUpstream()
	}
	h.upstream = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.seen.add(r)
		upstream.ServeHTTP(w, r)
	}))
	h.upstream.EnableHTTP2 = true
	h.upstream.TLS = upTLS
	// net/http logs a client's dropped handshake ("TLS handshake error ... EOF") to
	// stderr, where it landed inside a benchmark's result line (make bench lost that row):
	// the fake upstream's own errors say nothing about the broker.
	h.upstream.Config.ErrorLog = log.New(io.Discard, "", 0)
	h.upstream.StartTLS()
	t.Cleanup(h.upstream.Close)
	roots := x509.NewCertPool()
	roots.AddCert(h.upstream.Certificate())
	opts := Options{
		StateDir: h.state, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
		SANNames: []string{"host.lever.test"}, SANIPs: []net.IP{net.ParseIP("127.0.0.1")},
		Upstream: h.upstream.URL + "/v1base", APIKeyFile: h.keyFile, AuthHeader: AuthBearer,
		UpstreamRoots: roots, Logf: h.log.Logf, LLMRoutes: fixtureRoutes(),
	}
	if edit != nil {
		edit(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	h.url = "https://" + srv.JailAddr()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return h
}

// fixtureRoutes allows the fake upstreams' endpoints the older tests call (/llm/plain,
// /llm/stream, ...), plus the real model routes. Tests of the allowlist itself set
// LLMRoutes to nil to get a provider kind's defaults.
func fixtureRoutes() []string {
	r := []string{"POST /v1/messages", "GET /v1/models"}
	for _, p := range []string{"plain", "stream", "error", "chunked", "frame", "okframe", "s", "sink", "sized", "small", "big", "messages", "x"} {
		r = append(r, "GET /"+p, "POST /"+p)
	}
	return r
}

// fakeUpstream answers like an LLM API: JSON for plain requests, SSE when the request
// body asks for "stream":true. GET /v1base/blob?n=N returns N bytes.
func fakeUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			fl := w.(http.Flusher)
			for i := 0; i < 20; i++ {
				fmt.Fprintf(w, "event: content_block_delta\ndata: {\"i\":%d,\"text\":\"token\"}\n\n", i)
				fl.Flush()
			}
			fmt.Fprint(w, "event: message_stop\ndata: {}\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"path":%q,"got_bytes":%d,"content":"hello"}`, r.URL.Path, len(body))
	})
}

// issueClient mints a client certificate directly from the CA at dir (a second handle, so
// its clock can be moved without touching the server's).
func issueClient(t testing.TB, caDirPath, agent string, now time.Time, ttl time.Duration) tls.Certificate {
	t.Helper()
	c, err := ca.Load(caDirPath)
	if err != nil {
		t.Fatal(err)
	}
	c.Now = func() time.Time { return now }
	keyPEM, csrPEM, err := ca.NewKeyAndCSR(agent)
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := ca.ParseCSRPEM(csrPEM)
	certPEM, _, err := c.IssueClient(csr, agent, ca.RoleWorker, ttl)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func (h *harness) client(cert *tls.Certificate) *http.Client {
	return clientFor(h.srv.CA.Pool(), cert, true)
}

func clientFor(roots *x509.CertPool, cert *tls.Certificate, reuse bool) *http.Client {
	tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: false, MaxIdleConnsPerHost: 256, DisableKeepAlives: !reuse, Proxy: nil}
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

func (h *harness) workerCert(agent string) tls.Certificate {
	return issueClient(h.t, caDir(h.state), agent, time.Now(), time.Hour)
}

// get does a request and returns status and body; a transport error is returned as err.
func get(c *http.Client, method, url, body string) (int, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// grepTree fails the test for every file under dir (except skip) that contains needle.
func grepTree(t testing.TB, dir, needle string, skip ...string) int {
	t.Helper()
	n := 0
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		for _, s := range skip {
			if p == s {
				return nil
			}
		}
		n++
		data, _ := os.ReadFile(p)
		if bytes.Contains(data, []byte(needle)) {
			t.Errorf("%s contains the API key", p)
		}
		return nil
	})
	return n
}

type tlsCert = tls.Certificate

// issueClientRole mints a client certificate in role directly from the CA at dir.
func issueClientRole(t testing.TB, caDirPath, agent, role string) tls.Certificate {
	t.Helper()
	c, err := ca.Load(caDirPath)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, csrPEM, err := ca.NewKeyAndCSR(agent)
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := ca.ParseCSRPEM(csrPEM)
	certPEM, _, err := c.IssueClient(csr, agent, role, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return pairOf(t, certPEM, keyPEM)
}

func pairOf(t testing.TB, certPEM, keyPEM []byte) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}
