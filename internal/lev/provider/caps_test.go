package provider

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
)

// peakHeap samples live heap objects while fn runs and returns the peak above the start.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if v := read(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	if v := read(); v > peak.Load() {
		peak.Store(v)
	}
	if peak.Load() < base {
		return 0
	}
	return peak.Load() - base
}

// filler writes n bytes of b's pattern to w, stopping at the first write error (the
// client hung up); it returns how many bytes went out.
func filler(w io.Writer, pattern []byte, n int64) int64 {
	var sent int64
	for sent < n {
		m, err := w.Write(pattern)
		sent += int64(m)
		if err != nil {
			break
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	return sent
}

func TestCaps(t *testing.T) {
	const payload = 512 << 20 // what the hostile peer is prepared to send
	mib := bytes.Repeat([]byte("a"), 1<<20)
	type result struct{ sent atomic.Int64 }

	cases := []struct {
		name    string
		handler func(r *result) http.HandlerFunc
		raw     func(r *result, c net.Conn) // raw TCP server instead of an HTTP one
		client  func(base string) Provider
		wantErr string
		cap     int64
	}{
		{
			name: "oversized body, chunked",
			handler: func(r *result) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					io.WriteString(w, `{"choices":[{"message":{"content":"`)
					r.sent.Store(filler(w, mib, payload))
				}
			},
			client:  func(b string) Provider { return &OpenAI{BaseURL: b, Client: testClient()} },
			wantErr: "response body exceeded 64 MiB from 127.0.0.1",
			cap:     capread.BodyCap,
		},
		{
			name: "oversized body, declared length",
			handler: func(r *result) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Length", fmt.Sprint(payload))
					r.sent.Store(filler(w, mib, payload))
				}
			},
			client:  func(b string) Provider { return &Anthropic{BaseURL: b, Client: testClient()} },
			wantErr: "response body exceeded 64 MiB from 127.0.0.1",
			cap:     capread.BodyCap,
		},
		{
			name: "oversized error page",
			handler: func(r *result) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) {
					w.WriteHeader(http.StatusBadGateway)
					r.sent.Store(filler(w, mib, payload))
				}
			},
			client:  func(b string) Provider { return &OpenAI{BaseURL: b, Client: testClient()} },
			wantErr: "response body exceeded 64 MiB from 127.0.0.1",
			cap:     capread.BodyCap,
		},
		{
			name: "oversized SSE frame (many data lines, no blank line)",
			handler: func(r *result) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					line := append(append([]byte("data: "), bytes.Repeat([]byte("b"), 1<<20)...), '\n')
					r.sent.Store(filler(w, line, payload))
				}
			},
			client:  func(b string) Provider { return &OpenAI{BaseURL: b, Stream: true, Client: testClient()} },
			wantErr: "stream frame exceeded 8 MiB from 127.0.0.1",
			cap:     capread.FrameCap,
		},
		{
			name: "endless line on a stream",
			handler: func(r *result) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					io.WriteString(w, "event: content_block_delta\ndata: {\"type\":\"")
					r.sent.Store(filler(w, mib, payload))
				}
			},
			client:  func(b string) Provider { return &Anthropic{BaseURL: b, Stream: true, Client: testClient()} },
			wantErr: "stream frame exceeded 8 MiB from 127.0.0.1",
			cap:     capread.FrameCap,
		},
		{
			name: "body lying about its length (Content-Length: 100 with a chunked body)",
			raw: func(r *result, c net.Conn) {
				br := bufio.NewReader(c)
				http.ReadRequest(br)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n")
				chunk := append([]byte(fmt.Sprintf("%x\r\n", len(mib))), append(append([]byte{}, mib...), "\r\n"...)...)
				r.sent.Store(filler(c, chunk, payload))
			},
			client:  func(b string) Provider { return &Anthropic{BaseURL: b, Client: testClient()} },
			wantErr: "response body exceeded 64 MiB from 127.0.0.1",
			cap:     capread.BodyCap,
		},
		{
			name: "body lying about its length (small gzip expanding past the cap)",
			handler: func(r *result) http.HandlerFunc {
				var z bytes.Buffer
				zw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
				for i := 0; i < 256; i++ {
					zw.Write(mib)
				}
				zw.Close()
				return func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Encoding", "gzip")
					w.Header().Set("Content-Length", fmt.Sprint(z.Len()))
					n, _ := w.Write(z.Bytes())
					r.sent.Store(int64(n))
				}
			},
			client:  func(b string) Provider { return &OpenAI{BaseURL: b, Client: testClient()} },
			wantErr: "response body exceeded 64 MiB from 127.0.0.1",
			cap:     capread.BodyCap,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := &result{}
			var base string
			done := make(chan struct{})
			if tc.raw != nil {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				go func() {
					defer close(done)
					c, err := ln.Accept()
					if err != nil {
						return
					}
					defer c.Close()
					tc.raw(res, c)
				}()
				base = "http://" + ln.Addr().String()
			} else {
				h := tc.handler(res)
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					defer func() {
						select {
						case <-done:
						default:
							close(done)
						}
					}()
					h(w, r)
				}))
				defer srv.Close()
				base = srv.URL
			}
			var err error
			peak := peakHeap(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				_, err = tc.client(base).Complete(ctx, &Request{Model: "m", Messages: []Message{{Role: "user", Content: "hi"}}})
			})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("server still sending 30s after the client failed: connection not dropped")
			}
			sent := res.sent.Load()
			t.Logf("%s: error %q; peak heap +%d MiB (cap %s, peer prepared %d MiB, sent %d MiB before the drop)",
				tc.name, err, peak>>20, capread.Size(tc.cap), payload>>20, sent>>20)
			// Near the cap, not the payload: the cap plus slack for the transport and decoders.
			if limit := uint64(tc.cap)*3/2 + 16<<20; peak > limit {
				t.Errorf("peak heap %d MiB over %d MiB", peak>>20, limit>>20)
			}
			if tc.raw != nil || !strings.Contains(tc.name, "gzip") {
				if sent >= payload {
					t.Errorf("peer sent its whole %d MiB: the connection was not dropped at the cap", payload>>20)
				}
			}
		})
	}
}

func testClient() *http.Client {
	c, err := NewHTTPClient(TLSFiles{}, 0)
	if err != nil {
		panic(err)
	}
	return c
}

func TestRedirectSameOriginOnly(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("request reached the other origin")
	}))
	defer other.Close()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			http.Redirect(w, r, srv.URL+"/v2/chat/completions", http.StatusTemporaryRedirect)
		case "/v2/chat/completions":
			io.WriteString(w, `{"choices":[{"message":{"content":"same origin ok"},"finish_reason":"stop"}]}`)
		case "/x/chat/completions":
			http.Redirect(w, r, other.URL+"/steal", http.StatusTemporaryRedirect)
		}
	}))
	defer srv.Close()
	p := &OpenAI{BaseURL: srv.URL + "/v1", Client: testClient()}
	r, err := p.Complete(context.Background(), &Request{Model: "m"})
	if err != nil || r.Text != "same origin ok" {
		t.Fatalf("same-origin redirect: %v %+v", err, r)
	}
	p.BaseURL = srv.URL + "/x"
	_, err = p.Complete(context.Background(), &Request{Model: "m"})
	if err == nil || !strings.Contains(err.Error(), "redirect to another origin refused") {
		t.Fatalf("cross-origin redirect: err = %v", err)
	}
}
