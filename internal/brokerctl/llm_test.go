package brokerctl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// echoUpstream is a hostile upstream: it sends back every request header it got, in a
// plain body, an SSE stream, and an error, as a careless gateway's debug page might.
func echoUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sb strings.Builder
		for k, vs := range r.Header {
			fmt.Fprintf(&sb, "%s=%s;", k, strings.Join(vs, ","))
		}
		switch {
		case strings.HasSuffix(r.URL.Path, "/stream"):
			w.Header().Set("Content-Type", "text/event-stream")
			// The key split across two flushes, and whole in a frame.
			h := sb.String()
			mid := strings.Index(h, testKey) + 5
			fmt.Fprintf(w, "data: %s", h[:mid])
			w.(http.Flusher).Flush()
			fmt.Fprintf(w, "%s\n\n", h[mid:])
		case strings.HasSuffix(r.URL.Path, "/error"):
			w.Header().Set("X-Echo", sb.String())
			http.Error(w, "invalid key: "+sb.String(), http.StatusUnauthorized)
		default:
			// Split the key across two writes to exercise the redactor's hold-back.
			h := sb.String()
			mid := strings.Index(h, testKey) + 7
			io.WriteString(w, h[:mid])
			w.(http.Flusher).Flush()
			io.WriteString(w, h[mid:])
		}
	})
}

func TestAPIKeyInjectedAndNeverLeaks(t *testing.T) {
	for _, style := range []string{AuthBearer, AuthXAPIKey} {
		t.Run(style, func(t *testing.T) {
			h := newHarness(t, echoUpstream(), func(o *Options) { o.AuthHeader = style })
			cert := h.workerCert("w1")
			c := h.client(&cert)
			var responses []string
			for _, path := range []string{"/llm/plain", "/llm/stream", "/llm/error"} {
				req, _ := http.NewRequest("POST", h.url+path, strings.NewReader(`{"model":"m"}`))
				// A client trying to supply (or spoof) credentials of its own.
				req.Header.Set("Authorization", "Bearer client-supplied")
				req.Header.Set("X-Api-Key", "client-supplied")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var hdr strings.Builder
				resp.Header.Write(&hdr)
				responses = append(responses, hdr.String()+string(body))
				if strings.Contains(string(body), "client-supplied") {
					t.Errorf("%s: the client's own credential reached upstream: %s", path, body)
				}
			}
			// No unauthenticated route or failure path says the key either.
			for _, u := range []string{h.url + "/healthz", h.url + "/llm/x", h.url + "/enrol"} {
				_, body, _ := get(h.client(nil), "POST", u, "{}")
				responses = append(responses, body)
			}
			for i, r := range responses {
				if strings.Contains(r, testKey) {
					t.Errorf("response %d contains the API key: %s", i, r)
				}
				if i < 2 && !strings.Contains(r, strings.Repeat("*", len(testKey))) {
					t.Errorf("response %d: the echoed key was not masked: %s", i, r)
				}
			}
			// Upstream got exactly the host key, in the chosen header only.
			h.seen.mu.Lock()
			auth, xkey := h.seen.auth, h.seen.xkey
			h.seen.mu.Unlock()
			for _, a := range auth {
				if style == AuthBearer && a != "Bearer "+testKey || style == AuthXAPIKey {
					t.Errorf("upstream got Authorization %q with style %s", a, style)
				}
			}
			for _, x := range xkey {
				if style != AuthXAPIKey || x != testKey {
					t.Errorf("upstream got x-api-key %q with style %s", x, style)
				}
			}
			if len(auth)+len(xkey) != 3 {
				t.Errorf("upstream saw %d credential headers for 3 requests", len(auth)+len(xkey))
			}
			// Upstream unreachable: the error goes to the client and the audit; no key.
			h.upstream.Close()
			code, body, _ := get(c, "POST", h.url+"/llm/plain", "{}")
			if code != 502 || strings.Contains(body, testKey) {
				t.Errorf("upstream down: %d %s", code, body)
			}
			h.srv.Shutdown(context.Background())
			if n := grepTree(t, h.state, testKey); n < 5 {
				t.Errorf("grepped only %d files under the state dir", n)
			}
			if strings.Contains(h.log.String(), testKey) {
				t.Error("the broker's log contains the API key")
			}
			audit, _ := os.ReadFile(auditPath(h.state))
			for _, want := range []string{`"route":"/llm/plain"`, `"who":"w1"`, `"outcome":"refused"`, `"route":"/llm/stream"`} {
				if !strings.Contains(string(audit), want) {
					t.Errorf("audit lacks %s", want)
				}
			}
			if strings.Contains(string(audit), `{"model":"m"}`) || strings.Contains(string(audit), "client-supplied") {
				t.Error("audit holds a request body or header value")
			}
		})
	}
}

func TestAPIKeyFileChecked(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"world-readable", testKey, 0o644, "has mode 0644"},
		{"group-readable", testKey, 0o640, "has mode 0640"},
		{"empty", "\n", 0o600, "one non-empty line"},
		{"two lines", testKey + "\n" + testKey, 0o600, "one non-empty line"},
		// The broker refuses what lever up refuses, should it be started on its own.
		{"in the tree", testKey, 0o600, "lies in the tree"},
		{"two hard links", testKey, 0o600, "has 2 hard links"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			os.WriteFile(p, []byte(tc.content), tc.mode)
			os.Chmod(p, tc.mode)
			tree := filepath.Join(dir, "tree")
			os.MkdirAll(tree, 0o755)
			switch tc.name {
			case "in the tree":
				p = filepath.Join(tree, "key")
				os.WriteFile(p, []byte(tc.content), tc.mode)
			case "two hard links":
				os.Link(p, p+".2")
			}
			_, err := New(Options{StateDir: filepath.Join(dir, "s-"+tc.name), Listen: "127.0.0.1:0", SANNames: []string{"x"},
				Upstream: "http://127.0.0.1:1", APIKeyFile: p, Tree: tree})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("got %v, want an error naming %s and %q", err, p, tc.want)
			}
			if strings.Contains(err.Error(), testKey) {
				t.Fatal("error contains the key")
			}
		})
	}
}

func TestRequestHeadersAndPath(t *testing.T) {
	var gotPath, gotQuery, gotHost string
	var gotHdr http.Header
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotQuery, gotHost, gotHdr = r.URL.Path, r.URL.RawQuery, r.Host, r.Header.Clone()
		w.Header().Set("Set-Cookie", "track=1")
		w.Header().Set("Request-Id", "abc")
		w.Write([]byte("ok"))
	}), nil)
	cert := h.workerCert("w1")
	req, _ := http.NewRequest("POST", h.url+"/llm/v1/messages?beta=true", strings.NewReader("{}"))
	req.Header.Set("OpenAI-Beta", "assistants=v2")
	req.Header.Set("Cookie", "c=1")
	req.Header.Set("Connection", "X-Private")
	req.Header.Set("X-Private", "1")
	resp, err := h.client(&cert).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if gotPath != "/v1base/v1/messages" || gotQuery != "beta=true" || !strings.HasPrefix(gotHost, "127.0.0.1:") {
		t.Errorf("upstream saw path %q query %q host %q", gotPath, gotQuery, gotHost)
	}
	if gotHdr.Get("OpenAI-Beta") != "assistants=v2" {
		t.Error("API headers not forwarded")
	}
	for _, k := range []string{"Cookie", "X-Private"} {
		if gotHdr.Get(k) != "" {
			t.Errorf("forwarded %s", k)
		}
	}
	if resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("Request-Id") != "abc" {
		t.Errorf("response headers: %v", resp.Header)
	}
}

func TestCapsNamed(t *testing.T) {
	big := make([]byte, MaxBody+1)
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/sized"): // Content-Length says too much
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			w.Write(big)
		case strings.HasSuffix(r.URL.Path, "/chunked"): // no length, then too much
			w.Write(big[:1024])
			w.(http.Flusher).Flush()
			w.Write(big[1024:])
		case strings.HasSuffix(r.URL.Path, "/frame"):
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: small\n\n")
			w.(http.Flusher).Flush()
			io.WriteString(w, "data: ")
			chunk := strings.Repeat("x", 64<<10)
			for i := 0; i < MaxFrame/len(chunk)+1; i++ {
				io.WriteString(w, chunk)
			}
			io.WriteString(w, "\n\ndata: after\n\n")
		case strings.HasSuffix(r.URL.Path, "/sink"):
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "sunk %d", n)
		case strings.HasSuffix(r.URL.Path, "/okframe"):
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: "+strings.Repeat("y", MaxFrame-100)+"\n\n")
		}
	}), nil)
	cert := h.workerCert("w1")
	c := h.client(&cert)

	code, body, err := get(c, "GET", h.url+"/llm/sized", "")
	if err != nil || code != 502 || !strings.Contains(body, "64 MiB body cap") {
		t.Errorf("sized: %d %.200s %v", code, body, err)
	}
	_, _, err = get(c, "GET", h.url+"/llm/chunked", "")
	if err == nil {
		t.Error("chunked oversized body arrived whole")
	}
	code, body, err = get(c, "POST", h.url+"/llm/frame", "")
	if err != nil || code != 200 || !strings.Contains(body, "data: small\n\n") || !strings.Contains(body, "8 MiB frame cap") || strings.Contains(body, "after") || strings.Contains(body, "xxxxxxxx") {
		t.Errorf("frame: %d %.300s %v", code, body, err)
	}
	code, body, err = get(c, "POST", h.url+"/llm/okframe", "")
	if err != nil || code != 200 || len(body) != MaxFrame-100+len("data: \n\n") {
		t.Errorf("frame just under the cap: %d len %d %v", code, len(body), err)
	}
	// A request body over the cap is refused before it goes upstream.
	req, _ := http.NewRequest("POST", h.url+"/llm/sized", io.LimitReader(zeroReader{}, MaxBody+1))
	req.ContentLength = MaxBody + 1
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(b), "64 MiB body cap") {
		t.Errorf("oversized request: %d %s", resp.StatusCode, b)
	}
	// The same without a Content-Length: cut off at the cap while streaming upstream (a
	// JSON string of digits, so the body policy reads it as well-formed up to the cap).
	req, _ = http.NewRequest("POST", h.url+"/llm/sink", io.MultiReader(strings.NewReader(`{"x":"`), io.LimitReader(digitReader{}, MaxBody+1)))
	req.ContentLength = -1
	resp, err = c.Do(req)
	if err != nil {
		t.Fatalf("oversized chunked request: %v", err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(b), "64 MiB body cap") {
		t.Errorf("oversized chunked request: %d %s", resp.StatusCode, b)
	}
	h.srv.Shutdown(context.Background())
	audit, _ := os.ReadFile(auditPath(h.state))
	for _, want := range []string{"exceeds the 64 MiB body cap; connection aborted", `"outcome":"frame_cap"`} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("audit lacks %q", want)
		}
	}
}

// digitReader is an endless run of '0' characters.
type digitReader struct{}

func (digitReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
