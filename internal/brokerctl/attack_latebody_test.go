package brokerctl

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// deadlineWriter is a response writer whose read deadline calls are counted, and fail the
// test once the handler has returned, as net/http's HTTP/2 writer does (it dereferenced
// its released stream: a panic that took the whole broker down).
type deadlineWriter struct {
	*httptest.ResponseRecorder
	t        *testing.T
	returned bool
	calls    int
}

func (w *deadlineWriter) SetReadDeadline(time.Time) error {
	w.calls++
	if w.returned {
		w.t.Error("the read deadline was set through a response writer the handler had given back")
	}
	return nil
}

// TestBodyEndingAfterTheHandlerLeavesTheWriterAlone: the broker's upstream transport can
// read a request body's end after the handler has returned (an upstream that answers
// without reading the body; seen on HTTP/2, where TestPathTraversalRefused's run of
// requests hit it within a few dozen runs). That last read cleared the connection's read
// deadline through the response controller, a use of net/http's released writer. The
// rows read the body's end before and after audited's handler returns; the control
// (before) shows the end of a body does reach the controller.
func TestBodyEndingAfterTheHandlerLeavesTheWriterAlone(t *testing.T) {
	for _, tc := range []struct {
		name      string
		afterward bool // the body's end is read after the handler returned
		wantCalls int  // the deadline set at the start, and its clearing if read in time
	}{
		{"end read while the handler runs", false, 2},
		// The deadline set at the start, and moved to now as the handler returns with the
		// body unread (earlyclose.go), still before it returns.
		{"end read after the handler returned", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, http.NotFoundHandler(), nil)
			var body io.Reader
			handler := h.srv.audited("jail", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body = r.Body
				if !tc.afterward {
					io.ReadAll(r.Body)
				}
			}))
			w := &deadlineWriter{ResponseRecorder: httptest.NewRecorder(), t: t}
			r := httptest.NewRequest("POST", "/llm/v1/messages", strings.NewReader("{}"))
			handler.ServeHTTP(w, r)
			w.returned = true
			if tc.afterward {
				if b, _ := io.ReadAll(body); string(b) != "{}" {
					t.Fatalf("the late read got %q: the body did not reach it", b)
				}
			}
			if w.calls != tc.wantCalls {
				t.Fatalf("%d read deadline calls, want %d", w.calls, tc.wantCalls)
			}
		})
	}
}

// TestLateBodyReadIsCountedWithoutARace: the upstream transport's goroutine may read a
// request body after audited's handler has returned, while audited's deferred function
// reads the count of bytes in for the audit record. Under -race (CGO_ENABLED=1 go test
// -race) a plain counter is a data race between the two; the count must be atomic. The
// control reads the body while the handler runs, and its count reaches the record.
func TestLateBodyReadIsCountedWithoutARace(t *testing.T) {
	for _, late := range []bool{false, true} {
		h := newHarness(t, http.NotFoundHandler(), nil)
		done := make(chan struct{})
		handler := h.srv.audited("admin", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !late {
				io.ReadAll(r.Body)
				close(done)
				return
			}
			go func() { // as the transport's writeLoop does, unordered with the handler's return
				io.ReadAll(r.Body)
				close(done)
			}()
		}))
		r := httptest.NewRequest("POST", "/x", strings.NewReader("0123456789"))
		handler.ServeHTTP(httptest.NewRecorder(), r)
		<-done
		if !late {
			data, _ := os.ReadFile(auditPath(h.state))
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			var rec Record
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil || rec.Route != "/x" || rec.BytesIn != 10 {
				t.Fatalf("read in time: last audit line %q (%v), want /x with bytes_in 10", lines[len(lines)-1], err)
			}
		}
	}
}
