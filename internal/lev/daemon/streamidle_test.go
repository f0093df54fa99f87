package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/events"
)

// TestStreamIdleEnds: a daemon that answers the event stream and then sends nothing, not
// even a keepalive (hung), ends the client's wait with an error saying so, after its
// reconnects; the control is a daemon that sends only keepalives for longer than
// StreamIdle and then the run's end, which the client waits through and returns.
func TestStreamIdleEnds(t *testing.T) {
	old := StreamIdle
	StreamIdle = 300 * time.Millisecond
	t.Cleanup(func() { StreamIdle = old })
	cases := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		want    string
	}{
		{"hung: headers, then nothing", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, "sent nothing, not even a keepalive"},
		{"control: keepalives only, then the end", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			for i := 0; i < 10; i++ { // 10 x 100ms: longer than StreamIdle in all
				fmt.Fprint(w, ": keepalive\n\n")
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
			fmt.Fprintf(w, "id: 1\nevent: %s\ndata: {\"id\":1,\"type\":%q,\"status\":\"completed\"}\n\n", events.RunEnd, events.RunEnd)
			w.(http.Flusher).Flush()
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				tc.handler(w, r)
			}))
			defer srv.Close()
			c := &Client{Base: srv.URL, Token: "t"}
			// The generous outer bound is the test's own: reaching it is the failure.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_, err := c.Events(ctx, "r-20261130-100000-aaaaaa", 0, func(*events.Event) error { return nil })
			if ctx.Err() != nil {
				t.Fatal("the client waited until the test's own deadline")
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("control: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if calls.Load() < 2 {
				t.Errorf("no reconnect before giving up (%d calls)", calls.Load())
			}
		})
	}
}
