package brokerctl

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/keymask/keymasktest"
)

// recorder is a fake upstream that remembers every request it received.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path, rawPath, query string
	hdr                          http.Header
}

func (rc *recorder) add(r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.reqs = append(rc.reqs, recorded{r.Method, r.URL.Path, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone()})
}

func (rc *recorder) all() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]recorded(nil), rc.reqs...)
}

// rawRequest sends one request over a fresh TLS connection exactly as written (no client
// library normalises the path), and returns status and body.
func rawRequest(t *testing.T, h *harness, cert *tls.Certificate, method, target string, hdr string, body string) (int, string) {
	t.Helper()
	tc := &tls.Config{RootCAs: h.srv.CA.Pool(), MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}, ServerName: "127.0.0.1"}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	conn, err := tls.Dial("tcp", h.srv.JailAddr(), tc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s", method, target, hdr, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func gz(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

// The forms of the key a hostile upstream echoes; every one must reach the client masked.
func keyForms() map[string]string { return keymasktest.Forms(testKey) }

// Item 1: encodings. The jail cannot make the upstream encode the body (its Range,
// If-Range, Accept-Encoding, TE and spellings of them are never forwarded); the broker
// asks for gzip and decodes it itself; any other upstream encoding is refused with 502;
// and the key is masked in every form, in plain bodies, gzip bodies and SSE streams.
func TestEncodingAttacksRefused(t *testing.T) {
	rec := &recorder{}
	forms := keyForms()
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		form := r.URL.Query().Get("form")
		payload := "pre " + forms[form] + " post"
		if form == "" {
			payload = "benign body"
		}
		switch strings.TrimPrefix(r.URL.Path, "/v1base/") {
		case "identity":
			// Split across two flushed writes: the masker works on the stream.
			half := len(payload) / 2
			io.WriteString(w, payload[:half])
			w.(http.Flusher).Flush()
			io.WriteString(w, payload[half:])
		case "gzip": // honours the broker's Accept-Encoding: gzip
			w.Header().Set("Content-Encoding", r.URL.Query().Get("ce"))
			w.Write(gz(payload))
		case "sse":
			w.Header().Set("Content-Type", "text/event-stream")
			half := len(payload) / 2
			fmt.Fprintf(w, "data: {\"t\":%q", payload[:half])
			w.(http.Flusher).Flush()
			fmt.Fprintf(w, ",\"u\":%q}\n\n", payload[half:])
		case "deflate":
			w.Header().Set("Content-Encoding", r.URL.Query().Get("ce"))
			var b bytes.Buffer
			fw, _ := flate.NewWriter(&b, 5)
			fw.Write([]byte(payload))
			fw.Close()
			w.Write(b.Bytes())
		}
	}), func(o *Options) {
		o.LLMRoutes = []string{"GET /identity", "GET /gzip", "GET /sse", "GET /deflate", "POST /identity"}
	})
	cert := h.workerCert("w1")
	c := h.client(&cert)
	stars := strings.Repeat("*", 8)

	// Request headers a client uses to make the upstream encode or slice the body.
	t.Run("request headers", func(t *testing.T) {
		req, _ := http.NewRequest("GET", h.url+"/llm/identity?form=raw", nil)
		for k, v := range map[string]string{
			"Range": "bytes=0-10", "If-Range": "x", "Accept-Encoding": "br", "Te": "gzip",
			"Accept_Encoding": "deflate", "If-None-Match": "*", "X-Http-Method-Override": "DELETE",
			"X-Forwarded-Host": "evil", "Proxy-Foo": "1", "OpenAI-Beta": "assistants=v2", "Accept-Charset": "utf-16",
		} {
			req.Header[k] = []string{v}
		}
		req.Header.Set("Connection", "X-Hop")
		req.Header.Set("X-Hop", "1")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := rec.all()[len(rec.all())-1].hdr
		for _, k := range []string{"Range", "If-Range", "Te", "Accept_Encoding", "Accept-Charset", "If-None-Match", "X-Http-Method-Override", "X-Forwarded-Host", "Proxy-Foo", "X-Hop"} {
			if v := got.Values(k); len(v) > 0 {
				t.Errorf("forwarded %s: %v", k, v)
			}
		}
		if ae := got.Values("Accept-Encoding"); len(ae) != 1 || ae[0] != "gzip" {
			t.Errorf("upstream saw Accept-Encoding %v, want the broker's own [gzip]", ae)
		}
		// Positive control: API headers go through, the key is injected, the echo masked.
		if got.Get("OpenAI-Beta") != "assistants=v2" || got.Get("Authorization") != "Bearer "+testKey {
			t.Errorf("upstream headers %v", got)
		}
		if resp.StatusCode != 200 || strings.Contains(string(body), testKey) || !strings.Contains(string(body), stars) {
			t.Errorf("got %d %q", resp.StatusCode, body)
		}
	})

	t.Run("request body encoded", func(t *testing.T) {
		n := len(rec.all())
		code, body := rawRequest(t, h, &cert, "POST", "/llm/identity", "Content-Encoding: gzip\r\n", string(gz("{}")))
		if code != 415 || len(rec.all()) != n {
			t.Errorf("gzip request body: %d %s (upstream reached: %v)", code, body, len(rec.all()) != n)
		}
		// Positive control: the same request without the encoding is forwarded.
		if code, _ := rawRequest(t, h, &cert, "POST", "/llm/identity", "", "{}"); code != 200 || len(rec.all()) != n+1 {
			t.Errorf("plain request body: %d", code)
		}
	})

	// Upstream encodings: gzip (any case) is decoded by the broker and masked; everything
	// else is refused without a byte of the body reaching the client.
	for _, tc := range []struct {
		path, ce string
		want     int
	}{
		{"gzip", "gzip", 200},
		{"gzip", "GZIP", 200},
		{"gzip", "gzip, identity", 502},
		{"gzip", "identity, gzip", 502},
		{"gzip", "gzip, gzip", 502},
		{"gzip", "x-gzip", 502},
		{"gzip", "br", 502},
		{"deflate", "deflate", 502},
		{"deflate", "Deflate", 502},
	} {
		t.Run("upstream Content-Encoding "+tc.ce, func(t *testing.T) {
			resp, err := c.Get(h.url + "/llm/" + tc.path + "?form=raw&ce=" + url.QueryEscape(tc.ce))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("got %d %q, want %d", resp.StatusCode, body, tc.want)
			}
			if resp.Header.Get("Content-Encoding") != "" {
				t.Errorf("Content-Encoding %q passed through", resp.Header.Get("Content-Encoding"))
			}
			if tc.want == 200 && string(body) != "pre "+strings.Repeat("*", len(testKey))+" post" {
				t.Errorf("decoded body %q", body)
			}
			if tc.want == 502 && !strings.Contains(string(body), "upstream_encoding") {
				t.Errorf("refusal %q", body)
			}
		})
	}

	// Every form of the key, in a plain body, a gzip body and an SSE stream.
	for name, enc := range forms {
		for _, path := range []string{"identity", "gzip", "sse"} {
			t.Run("form "+name+" "+path, func(t *testing.T) {
				resp, err := c.Get(h.url + "/llm/" + path + "?ce=gzip&form=" + name)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				// SSE quotes the payload as JSON, which escapes backslashes.
				if resp.StatusCode != 200 || strings.Contains(string(body), enc) || strings.Contains(string(body), testKey) {
					t.Errorf("%s leaked: %d %q", name, resp.StatusCode, body)
				}
				if !strings.Contains(string(body), "pre ") || !strings.Contains(string(body), "****") {
					t.Errorf("%s: no masked payload in %q", name, body)
				}
			})
		}
	}
	// Positive control: a benign body passes byte for byte.
	if _, body, _ := get(c, "GET", h.url+"/llm/identity", ""); body != "benign body" {
		t.Errorf("benign body changed: %q", body)
	}
	h.srv.Shutdown(t.Context())
	audit, _ := os.ReadFile(auditPath(h.state))
	if !bytes.Contains(audit, []byte(`Content-Encoding \"deflate\"`)) || !bytes.Contains(audit, []byte(`"status":502`)) {
		t.Errorf("encoding refusal not audited:\n%s", audit)
	}
	grepTree(t, h.state, testKey)
}

// Item 2: the key in a response header name, a header value, and upstream error text the
// broker quotes into its 502 never reaches the client, the audit log or the broker's log.
func TestKeyInHeaderNamesAndErrorText(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-"+testKey, "v")
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		w.Header().Set("X-B64", base64.StdEncoding.EncodeToString([]byte(testKey)))
		io.WriteString(w, "ok")
	}), nil)
	cert := h.workerCert("w1")
	resp, err := h.client(&cert).Post(h.url+"/llm/plain", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var hdr bytes.Buffer
	resp.Header.Write(&hdr)
	if strings.Contains(hdr.String(), testKey) || strings.Contains(hdr.String(), base64.StdEncoding.EncodeToString([]byte(testKey))[:20]) {
		t.Errorf("key in response headers:\n%s", hdr.String())
	}
	// Positive control: the headers arrived, masked.
	if resp.Header.Get("X-"+strings.Repeat("*", len(testKey))) != "v" || !strings.Contains(resp.Header.Get("X-Echo"), "****") {
		t.Errorf("masked headers missing:\n%s", hdr.String())
	}

	// An upstream whose malformed answer quotes the key: net/http puts the offending line
	// into its error, which the broker reports in the 502 body and the audit detail.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nbroken header %s\r\n\r\n", req.Header.Get("Authorization"))
			}()
		}
	}()
	h2 := newHarness(t, nil, func(o *Options) { o.Upstream = "http://" + ln.Addr().String() + "/v1" })
	cert2 := h2.workerCert("w1")
	code, body, err := get(h2.client(&cert2), "POST", h2.url+"/llm/plain", "{}")
	if err != nil {
		t.Fatal(err)
	}
	if code != 502 || strings.Contains(body, testKey) {
		t.Errorf("malformed upstream: %d %s", code, body)
	}
	if !strings.Contains(body, "broken header Bearer "+strings.Repeat("*", len(testKey))) {
		t.Errorf("the error text did not quote the (masked) key, so this case proves nothing: %s", body)
	}
	h2.srv.Shutdown(t.Context())
	audit, _ := os.ReadFile(auditPath(h2.state))
	if !bytes.Contains(audit, []byte("broken header Bearer ***")) {
		t.Errorf("audit lacks the masked error:\n%s", audit)
	}
	grepTree(t, h2.state, testKey)
	if strings.Contains(h2.log.String(), testKey) {
		t.Error("broker log holds the key")
	}
}

// Item 3: paths that would leave the upstream's base path, in every spelling, are refused
// with 400 before anything is sent upstream; the clean path is forwarded as is.
func TestPathTraversalRefused(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		io.WriteString(w, "reached "+r.URL.EscapedPath())
	}), nil)
	cert := h.workerCert("w1")
	for _, tc := range []struct {
		target string
		want   int
	}{
		{"/llm/v1/messages", 200}, // positive control
		{"/llm/v1/messages?beta=true", 200},
		{"/llm/%2e%2e/x", 400},
		{"/llm/%2E%2E/x", 400},
		{"/llm/.%2e/x", 400},
		{"/llm/%2e./x", 400},
		{"/llm/%252e%252e/x", 400},
		{"/llm/v1/..%2fx", 400},
		{"/llm/v1%2f..%2f..%2fx", 400},
		{"/llm/v1%5c..%5cx", 400},
		{"/llm/v1\\..\\x", 400},
		{"/llm/v1/%6dessages", 400},
		{"/llm/./v1/messages", 400},
		{"/llm/v1//messages", 400},
		{"/llm/v1/messages/", 400},
		{"/llm/v1/messages;x=1", 400},
		{"/llm/v1/messages?_method=DELETE", 400},
		{"/llm/v1/messages?x-http-method-override=GET", 400},
		{"/llm/v1/messages?a=1;b=2", 400},
		{"/llm/../v1base/v1/messages", 0}, // cleaned or refused by the mux; never forwarded outside
		{"/llm/v1/../../x", 0},
	} {
		t.Run(tc.target, func(t *testing.T) {
			n := len(rec.all())
			code, body := rawRequest(t, h, &cert, "POST", tc.target, "", "{}")
			reqs := rec.all()
			switch tc.want {
			case 200:
				if code != 200 || len(reqs) != n+1 || reqs[n].path != "/v1base/v1/messages" {
					t.Fatalf("clean path: %d %q", code, body)
				}
			case 400:
				if code != 400 || !strings.Contains(body, "bad_path") || len(reqs) != n {
					t.Fatalf("got %d %q (upstream reached: %v), want 400 bad_path", code, body, len(reqs) != n)
				}
			default:
				if code == 200 || len(reqs) != n {
					t.Fatalf("got %d %q, upstream reached: %v", code, body, len(reqs) != n)
				}
			}
		})
	}
	// The same over HTTP/2, where the path travels as the :path pseudo-header.
	h2c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: h.srv.CA.Pool(), Certificates: []tls.Certificate{cert}}, ForceAttemptHTTP2: true}}
	for _, target := range []string{"/llm/%2e%2e/x", "/llm/v1%2f..%2fx", "/llm/v1/messages"} {
		n := len(rec.all())
		u, _ := url.Parse(h.url + target)
		resp, err := h2c.Do(&http.Request{Method: "POST", URL: u, Body: io.NopCloser(strings.NewReader("{}")), ContentLength: 2, Header: http.Header{}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 400
		if target == "/llm/v1/messages" {
			want = 200 // positive control
		}
		if resp.ProtoMajor != 2 || resp.StatusCode != want || (want == 400) != (len(rec.all()) == n) {
			t.Errorf("h2 %s: %s %d (upstream reached: %v)", target, resp.Proto, resp.StatusCode, len(rec.all()) != n)
		}
	}
	for _, r := range rec.all() {
		if !strings.HasPrefix(r.rawPath, "/v1base/") || strings.Contains(r.rawPath, "..") {
			t.Errorf("upstream saw %q", r.rawPath)
		}
	}
}

// Item 1 (framing): an upstream that frames or encodes its body in a way the broker did
// not ask for, spelled at the HTTP level (raw bytes from a loopback server), is refused;
// the same key in a plain chunked body is masked (positive control).
func TestUpstreamFramingTricksRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	answers := map[string]string{
		"/v1/chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
		"/v1/te-gzip": "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
		"/v1/two-ce":  "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
		"/v1/ce-case": "HTTP/1.1 200 OK\r\ncontent-encoding: Deflate\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
		"/v1/partial": "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				body := "echo " + strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
				fmt.Fprintf(conn, answers[req.URL.Path], len(body), body)
			}()
		}
	}()
	h := newHarness(t, nil, func(o *Options) {
		o.Upstream = "http://" + ln.Addr().String() + "/v1"
		o.LLMRoutes = []string{"GET /chunked", "GET /te-gzip", "GET /two-ce", "GET /ce-case", "GET /partial"}
	})
	cert := h.workerCert("w1")
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/chunked", 200},
		{"/te-gzip", 502},
		{"/two-ce", 502},
		{"/ce-case", 502},
		{"/partial", 502},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, body, err := get(h.client(&cert), "GET", h.url+"/llm"+tc.path, "")
			if err != nil || code != tc.want || strings.Contains(body, testKey) {
				t.Fatalf("got %d %q %v, want %d", code, body, err, tc.want)
			}
			if tc.want == 200 && body != "echo "+strings.Repeat("*", len(testKey)) {
				t.Errorf("chunked echo %q", body)
			}
		})
	}
}
