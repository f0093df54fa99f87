package update

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
)

// TestCheck: the releases answer of a loopback server, read and compared; an answer past
// the 64 MiB cap (declared, or streamed with no length) fails with capread's message naming
// the cap and the peer, and the server sees the connection dropped before it sent it all.
func TestCheck(t *testing.T) {
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			fmt.Fprint(w, `{"tag_name":"v1.2.0","html_url":"https://example.invalid/r/v1.2.0","assets":[{"x":1}]}`)
		case "/huge": // chunked: no Content-Length to refuse it by
			chunk := []byte(`{"tag_name":"v9.9.9","body":"` + strings.Repeat("A", 1<<20))
			for i := 0; i < 128; i++ {
				n, err := w.Write(chunk)
				written.Add(int64(n))
				if err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		case "/declared":
			w.Header().Set("Content-Length", fmt.Sprint(capread.BodyCap+1))
			w.WriteHeader(200)
		case "/notag":
			fmt.Fprint(w, `{"name":"x"}`)
		case "/500":
			http.Error(w, "boom", 500)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name, path, current string
		latest              string
		avail               bool
		note, err           string
	}{
		{"newer release", "/ok", "v1.0.0", "v1.2.0", true, "", ""},
		{"same release", "/ok", "1.2.0", "v1.2.0", false, "", ""},
		{"older release", "/ok", "v1.10.0", "v1.2.0", false, "", ""},
		{"development build", "/ok", "dev", "v1.2.0", false, `this build's version "dev" is not a release version`, ""},
		{"streamed past the cap", "/huge", "v1.0.0", "", false, "", "update check: response body exceeded 64 MiB from 127.0.0.1"},
		{"declared past the cap", "/declared", "v1.0.0", "", false, "", "update check: response body exceeded 64 MiB from 127.0.0.1"},
		{"no tag", "/notag", "v1.0.0", "", false, "", "has no tag_name"},
		{"server error", "/500", "v1.0.0", "", false, "", "answered 500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Checker{URL: srv.URL + tc.path, Current: tc.current}
			r, err := c.Check(context.Background())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Latest != tc.latest || r.UpdateAvailable != tc.avail || !strings.Contains(r.Note, tc.note) || r.Source != c.URL {
				t.Fatalf("%+v", r)
			}
		})
	}
	// The server writes 128 MiB only if the client keeps reading; it stops well short (what
	// the kernel's socket buffers hold past the cap).
	time.Sleep(200 * time.Millisecond)
	if w := written.Load(); w >= 100<<20 {
		t.Fatalf("the server wrote all %d bytes: the client read past the cap", w)
	} else {
		t.Logf("the server wrote %d of 128 MiB before the client dropped the connection", w)
	}
}

// TestCachedForAnHour: the daemon's answer is cached for CacheTTL (one request to the
// source within it, a second once it has passed); a failed check is not cached.
func TestCachedForAnHour(t *testing.T) {
	var hits atomic.Int32
	fail := atomic.Bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"tag_name":"v2.0.0"}`)
	}))
	defer srv.Close()
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	c := &Checker{URL: srv.URL, Current: "v1.0.0", Now: func() time.Time { return now }}
	for i, step := range []struct {
		advance  time.Duration
		fail     bool
		wantHits int32
		wantErr  bool
	}{
		{0, false, 1, false},
		{59 * time.Minute, false, 1, false}, // cached
		{2 * time.Minute, true, 2, true},    // stale: checked again, failed
		{0, false, 3, false},                // the failure was not cached
		{30 * time.Minute, true, 3, false},  // cached again: the source is not asked
	} {
		now = now.Add(step.advance)
		fail.Store(step.fail)
		r, err := c.Cached(context.Background())
		if (err != nil) != step.wantErr || hits.Load() != step.wantHits {
			t.Fatalf("step %d: err %v, %d hits, want %d", i, err, hits.Load(), step.wantHits)
		}
		if err == nil && (r.Latest != "v2.0.0" || !r.UpdateAvailable) {
			t.Fatalf("step %d: %+v", i, r)
		}
	}
}

// TestSourceURL: LEV_UPDATE_URL overrides the GitHub default; a non-http(s) one is refused
// naming the variable.
func TestSourceURL(t *testing.T) {
	t.Setenv(URLEnv, "")
	if SourceURL() != DefaultURL {
		t.Fatal(SourceURL())
	}
	t.Setenv(URLEnv, "file:///etc/passwd")
	_, err := (&Checker{Current: "v1.0.0"}).Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), `update source "file:///etc/passwd" (LEV_UPDATE_URL): want an http(s) URL`) {
		t.Fatalf("err = %v", err)
	}
}
