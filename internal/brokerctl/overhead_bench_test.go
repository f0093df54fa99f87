package brokerctl

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// overheadBody is a small model call's request body: the body policy reads all of it.
const overheadBody = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`

// BenchmarkBrokerOverhead measures what the broker adds to one small model call (issue 30
// item 4): each iteration makes the same call once directly to the upstream (TLS) and
// once through the broker's /llm/ (mTLS, body policy, masker, audit line), interleaved so
// both see the same machine load. Reported per case: the p50 of each path and their
// difference (overhead-p50-ms), which the goals table compares with the goal.
//
//   - keepalive: both clients keep their connection (the agent's usual case);
//   - newconn: a new TCP connection and a full TLS handshake per call (for the broker:
//     with the client certificate);
//   - resumed: a new TCP connection per call resuming the TLS session (the client keeps
//     a session cache, as lev's provider client and brokerclient do);
//   - twopacket: a kept-alive HTTP/1.1 client that writes the header and the body in two
//     packets with Nagle on (as many non-Go clients do): a delayed ACK on any leg shows
//     here as ~40 ms.
func BenchmarkBrokerOverhead(b *testing.B) {
	// The upstream's certificate is ECDSA P-256 like the broker's (and like the model APIs'),
	// not httptest's RSA one, so a handshake costs the same on both paths.
	upCA, err := ca.LoadOrCreate(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	upCert, err := upCA.IssueServerCertSANs([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	h := newHarnessTLS(b, loadUpstream(), &tls.Config{Certificates: []tls.Certificate{*upCert}}, nil)
	cert := h.workerCert("bench")
	upRoots := x509.NewCertPool()
	upRoots.AddCert(h.upstream.Certificate())
	directURL := h.upstream.URL + "/v1base/small"
	brokerURL := h.url + "/llm/small"
	floor := floorProxy(b, upCA, h.upstream.URL+"/v1base", upRoots)
	for _, tc := range []struct{ name, kind string }{
		{"keepalive", "keepalive"},
		{"newconn", "newconn"},
		{"resumed", "resumed"},
		{"twopacket", "twopacket"},
		// The floor: the keepalive case through a bare TLS proxy with the broker's
		// upstream transport and none of its controls (no mTLS, body policy, masker,
		// audit): what any proxy hop costs here.
		{"floor-keepalive", "keepalive"},
	} {
		kind := tc.kind
		b.Run(tc.name, func(b *testing.B) {
			direct := newOverheadCaller(b, kind, upRoots, nil, directURL)
			broker := newOverheadCaller(b, kind, h.srv.CA.Pool(), &cert, brokerURL)
			if tc.name == "floor-keepalive" {
				broker = newOverheadCaller(b, kind, upCA.Pool(), nil, floor.URL+"/small")
			}
			defer direct.close()
			defer broker.close()
			// One call each first: pools and session caches are warm, as they are for an
			// agent after its first call.
			for _, c := range []*overheadCaller{direct, broker} {
				if err := c.call(); err != nil {
					b.Fatal(err)
				}
			}
			dl := make([]time.Duration, 0, b.N)
			bl := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, p := range []struct {
					c   *overheadCaller
					lat *[]time.Duration
				}{{direct, &dl}, {broker, &bl}} {
					t0 := time.Now()
					if err := p.c.call(); err != nil {
						b.Fatal(err)
					}
					*p.lat = append(*p.lat, time.Since(t0))
				}
			}
			b.StopTimer()
			if kind == "resumed" && !broker.resumed {
				b.Fatal("the broker never resumed a TLS session: the resumed case measured full handshakes")
			}
			d, br := p50ms(dl), p50ms(bl)
			b.ReportMetric(d, "direct-p50-ms")
			b.ReportMetric(br, "broker-p50-ms")
			b.ReportMetric(br-d, "overhead-p50-ms")
		})
	}
}

// floorProxy is the least a TLS proxy in front of upstream does: terminate TLS, send the
// request on with the broker's own upstream transport, copy the answer back.
func floorProxy(b *testing.B, upCA *ca.CA, upstream string, roots *x509.CertPool) *httptest.Server {
	cert, err := upCA.IssueServerCertSANs([]string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: newUpstreamTransport(roots)}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.Path, r.Body)
		out.ContentLength = r.ContentLength
		out.Header.Set("Content-Type", r.Header.Get("Content-Type"))
		resp, err := client.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
	srv.StartTLS()
	b.Cleanup(srv.Close)
	return srv
}

func p50ms(l []time.Duration) float64 {
	if len(l) == 0 {
		return 0
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return float64(l[(len(l)-1)/2].Nanoseconds()) / 1e6
}

// overheadCaller makes one small model call per call(), the way its case says.
type overheadCaller struct {
	kind    string
	url     *url.URL
	client  *http.Client // keepalive, newconn, resumed
	tc      *tls.Config  // twopacket
	conn    *tls.Conn    // twopacket: the kept connection
	br      *bufio.Reader
	resumed bool // some connection resumed its TLS session
}

func newOverheadCaller(b *testing.B, kind string, roots *x509.CertPool, cert *tls.Certificate, raw string) *overheadCaller {
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	c := &overheadCaller{kind: kind, url: u}
	tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	if kind == "resumed" {
		tc.ClientSessionCache = tls.NewLRUClientSessionCache(8)
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if cs.DidResume {
				c.resumed = true
			}
			return nil
		}
	}
	if kind == "twopacket" {
		tc.NextProtos = []string{"http/1.1"}
		c.tc = tc
		return c
	}
	c.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tc, ForceAttemptHTTP2: false, Proxy: nil,
		DisableKeepAlives: kind != "keepalive", MaxIdleConnsPerHost: 4,
	}}
	return c
}

func (c *overheadCaller) close() {
	if c.client != nil {
		c.client.CloseIdleConnections()
	}
	if c.conn != nil {
		c.conn.Close()
	}
}

func (c *overheadCaller) call() error {
	if c.kind == "twopacket" {
		return c.twoPacket()
	}
	resp, err := c.client.Post(c.url.String(), "application/json", strings.NewReader(overheadBody))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return checkSmall(resp)
}

func checkSmall(resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(body) != `{"ok":true}` {
		return fmt.Errorf("status %d, body %q", resp.StatusCode, body)
	}
	return nil
}

// twoPacket writes the request's header and body as two TLS records on a connection with
// Nagle on, so the body waits for the header's ACK as it would from such a client.
func (c *overheadCaller) twoPacket() error {
	if c.conn == nil {
		raw, err := net.DialTimeout("tcp", c.url.Host, 10*time.Second)
		if err != nil {
			return err
		}
		raw.(*net.TCPConn).SetNoDelay(false)
		tc := c.tc.Clone()
		tc.ServerName, _, _ = net.SplitHostPort(c.url.Host)
		c.conn = tls.Client(raw, tc)
		c.br = bufio.NewReader(c.conn)
	}
	c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", c.url.Path, c.url.Host, len(overheadBody))
	if _, err := io.WriteString(c.conn, head); err != nil {
		return err
	}
	if _, err := io.WriteString(c.conn, overheadBody); err != nil {
		return err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return checkSmall(resp)
}
