package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRetry: a loopback upstream answers a scripted sequence of statuses; the provider
// retries 429 and 5xx (Anthropic's 529 too), honours Retry-After in seconds and as an
// HTTP-date, backs off with capped, jittered doubling otherwise, stops after Attempts,
// refuses a Retry-After past its bound, replays the same body each time, and never
// retries a 4xx other than 429 nor a stream that has started.
func TestRetry(t *testing.T) {
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	type step struct {
		code int
		hdr  string // Retry-After
		body string
	}
	ok := step{200, "", `{"content":[{"type":"text","text":"fine"}],"stop_reason":"end_turn","usage":{"input_tokens":7,"output_tokens":3}}`}
	cases := []struct {
		name    string
		steps   []step
		calls   int
		waits   []time.Duration // exact waits; nil with backoff set: checked against bounds
		backoff bool
		err     string
	}{
		{"429 then success, Retry-After seconds", []step{{429, "2", "slow down"}, ok}, 2, []time.Duration{2 * time.Second}, false, ""},
		{"503 then success, Retry-After HTTP-date", []step{{503, now.Add(5 * time.Second).Format(http.TimeFormat), ""}, ok}, 2, []time.Duration{5 * time.Second}, false, ""},
		{"Retry-After date in the past: retry at once", []step{{503, now.Add(-time.Minute).Format(http.TimeFormat), ""}, ok}, 2, []time.Duration{0}, false, ""},
		{"529 overloaded, no Retry-After: backoff", []step{{529, "", "overloaded"}, {500, "", ""}, ok}, 3, nil, true, ""},
		{"unreadable Retry-After: backoff", []step{{429, "soon", ""}, ok}, 2, nil, true, ""},
		{"5xx every time: gives up after 4 attempts", []step{{500, "", "boom"}, {502, "", "boom"}, {503, "", "boom"}, {504, "", "last"}}, 4, nil, true, "HTTP 504 from 127.0.0.1: last (after 4 attempts)"},
		{"Retry-After past the bound: no retry", []step{{429, "3600", "quota"}}, 1, []time.Duration{}, false, "asks to retry after 1h0m0s, longer than lev waits (1m0s)"},
		{"400: no retry", []step{{400, "1", "bad request"}}, 1, []time.Duration{}, false, "HTTP 400 from 127.0.0.1: bad request"},
		{"401: no retry", []step{{401, "", "no key"}}, 1, []time.Duration{}, false, "HTTP 401"},
		{"control: success first time", []step{ok}, 1, []time.Duration{}, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var bodies []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				i := len(bodies)
				bodies = append(bodies, string(b))
				mu.Unlock()
				if i >= len(tc.steps) {
					t.Errorf("call %d past the script", i+1)
					w.WriteHeader(599)
					return
				}
				s := tc.steps[i]
				if s.hdr != "" {
					w.Header().Set("Retry-After", s.hdr)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(s.code)
				io.WriteString(w, s.body)
			}))
			defer srv.Close()
			var waits []time.Duration
			rt := DefaultRetry
			rt.Now = func() time.Time { return now }
			rt.Sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
			a := &Anthropic{BaseURL: srv.URL, Client: testClient(), Retry: &rt}
			resp, err := a.Complete(context.Background(), convo)
			if len(bodies) != tc.calls {
				t.Fatalf("%d calls, want %d", len(bodies), tc.calls)
			}
			for i := range bodies {
				if bodies[i] != bodies[0] || bodies[i] == "" {
					t.Fatalf("attempt %d sent another body: %q vs %q", i+1, bodies[i], bodies[0])
				}
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
			} else if err != nil || resp.Text != "fine" || resp.Usage.InputTokens != 7 {
				t.Fatalf("resp %+v err %v", resp, err)
			}
			if tc.backoff {
				if len(waits) != tc.calls-1 {
					t.Fatalf("waits %v, want %d", waits, tc.calls-1)
				}
				for i, w := range waits {
					full := min(rt.Base<<i, rt.Max)
					if w < full/2 || w > full {
						t.Errorf("wait %d = %v, want within [%v, %v]", i+1, w, full/2, full)
					}
				}
			} else if fmt.Sprint(waits) != fmt.Sprint(tc.waits) && !(len(waits) == 0 && len(tc.waits) == 0) {
				t.Fatalf("waits %v, want %v", waits, tc.waits)
			}
		})
	}
}

// TestRetryBackoffCapped: the doubling stops at Max, whatever the attempt.
func TestRetryBackoffCapped(t *testing.T) {
	r := Retry{Base: time.Second, Max: 20 * time.Second}
	for n := 1; n <= 40; n++ {
		full := min(time.Second<<min(n-1, 10), 20*time.Second)
		if d := r.backoff(n); d < full/2 || d > full {
			t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, full/2, full)
		}
	}
}

// TestRetryWaitCancelled: a run cancelled while lev waits to retry stops waiting at once
// (real timers: a 30 s Retry-After, cancelled after 50 ms).
func TestRetryWaitCancelled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(429)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := (&OpenAI{BaseURL: srv.URL, Client: testClient()}).Complete(ctx, convo)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 5*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(t0))
	}
}

// TestNoRetryAfterStreamStarted: a stream that breaks after its 200 is not sent again
// (the model has acted on the call once); the error says the stream broke.
func TestNoRetryAfterStreamStarted(t *testing.T) {
	for _, mk := range []func(string) Provider{
		func(b string) Provider { return &OpenAI{BaseURL: b, Stream: true, Client: testClient()} },
		func(b string) Provider { return &Anthropic{BaseURL: b, Stream: true, Client: testClient()} },
	} {
		calls := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hel")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection drops mid-frame
		}))
		rt := DefaultRetry
		rt.Sleep = func(context.Context, time.Duration) error { return nil }
		p := mk(srv.URL)
		switch x := p.(type) {
		case *OpenAI:
			x.Retry = &rt
		case *Anthropic:
			x.Retry = &rt
		}
		_, err := p.Complete(context.Background(), convo)
		srv.Close()
		if err == nil || calls != 1 {
			t.Fatalf("%T: err %v after %d calls, want an error after 1", p, err, calls)
		}
	}
}
