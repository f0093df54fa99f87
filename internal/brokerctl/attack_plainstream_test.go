package brokerctl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/keymask"
)

// TestUnlabelledBodyThroughTheStreamMasker: every body not labelled text/event-stream now
// also passes the SSE masker line by line (streamBody). This checks what that must not
// break and how it ends what it cannot hold. Benign bodies come back byte for byte: a
// one-line JSON document far past plainLine and joinLimit, pretty-printed JSON past
// joinLimit, bare-CR lines, text with no line end at all. A line an SSE parser reads
// (data:) past the frame cap aborts the response, as does a stream needing more channels
// than the masker keeps; controls: the same line just under the cap arrives whole, and the
// audit log names each cap.
func TestUnlabelledBodyThroughTheStreamMasker(t *testing.T) {
	const frameCap = 64 << 10
	var pretty strings.Builder
	pretty.WriteString("{\n")
	for i := 0; pretty.Len() < 2*keymask.JoinLimit; i++ {
		fmt.Fprintf(&pretty, "  \"k%d\": \"value %d sk-\",\n", i, i)
	}
	pretty.WriteString("  \"end\": true\n}\n")
	var keys strings.Builder
	keys.WriteString("data: {")
	for i := 0; i < 2*keymask.MaxChannels; i++ {
		fmt.Fprintf(&keys, "\"k%d\":\"v\",", i)
	}
	keys.WriteString("\"z\":\"v\"}\n\n")
	rows := []struct {
		name, ct, body string
		whole          bool   // arrives byte for byte; else the connection is aborted
		audit          string // the audit line's detail for an abort
	}{
		{"one-line JSON of 1 MiB", "application/json", `{"a":"` + strings.Repeat("x", 1<<20) + `"}`, true, ""},
		{"pretty-printed JSON past keymask.JoinLimit", "application/json", pretty.String(), true, ""},
		{"bare CR lines", "text/plain", strings.Repeat("line sk-\r", 20000) + "end", true, ""},
		{"no line end", "application/octet-stream", strings.Repeat("z", 3*keymask.JoinLimit), true, ""},
		{"a data line just under the frame cap", "text/plain", "data: " + strings.Repeat("d", frameCap-100) + "\n\n", true, ""},
		{"a data line past the frame cap", "text/plain", "data: " + strings.Repeat("d", frameCap+1) + "\n\n", false, "upstream response line exceeds the 64 KiB frame cap; connection aborted"},
		{"more keys than the masker follows", "text/plain", keys.String() + "data: {\"text\":\"after\"}\n\n", false, "more than the key masker follows; connection aborted"},
	}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, rw := range rows {
			if rw.name == r.URL.Query().Get("m") {
				w.Header().Set("Content-Type", rw.ct)
				io.WriteString(w, rw.body)
				return
			}
		}
		http.Error(w, "no such row", 404)
	}), func(o *Options) { o.LLMRoutes = []string{"GET /v1/models"}; o.MaxFrame = frameCap })
	cert := h.workerCert("w1")
	c := h.client(&cert)
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			code, body, err := get(c, "GET", h.url+"/llm/v1/models?m="+strings.ReplaceAll(rw.name, " ", "+"), "")
			if rw.whole {
				if err != nil || code != 200 || body != rw.body {
					t.Fatalf("%d %v: %d bytes back of %d, differing: %v", code, err, len(body), len(rw.body), body != rw.body)
				}
				return
			}
			if err == nil {
				t.Fatalf("arrived whole (%d, %d bytes); want the connection aborted", code, len(body))
			}
		})
	}
	h.srv.Shutdown(context.Background())
	audit, _ := os.ReadFile(auditPath(h.state))
	for _, rw := range rows {
		if rw.audit != "" && !strings.Contains(string(audit), rw.audit) {
			t.Errorf("audit lacks %q", rw.audit)
		}
	}
}

// TestUnlabelledStreamArrivesAsItComes: a stream labelled as something else is masked as
// a stream but not read whole before it is sent (only a body that begins as JSON is), and
// a header held because it ends in what could start the key goes out with the first frame
// that breaks the match. Each time the client must read the first frame while the upstream
// still holds the second.
func TestUnlabelledStreamArrivesAsItComes(t *testing.T) {
	for _, tc := range []struct{ name, ct, note string }{
		{"labelled text/event-stream", "text/event-stream", ""}, // SSE frames flushed as they arrive
		{"labelled text/plain", "text/plain", ""},
		{"labelled application/json", "application/json", ""},
		{"a header ending in sk-", "text/event-stream", "req-sk-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ct)
				if tc.note != "" {
					w.Header().Set("X-Note", tc.note)
				}
				io.WriteString(w, "event: a\ndata: first\n\n")
				w.(http.Flusher).Flush()
				<-release
				io.WriteString(w, "event: b\ndata: second\n\n")
			}), nil)
			defer close(release)
			cert := h.workerCert("w1")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", h.url+"/llm/s", strings.NewReader("{}"))
			resp, err := h.client(&cert).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := resp.Header.Get("X-Note"); got != tc.note {
				t.Errorf("X-Note %q, want %q", got, tc.note)
			}
			br := bufio.NewReader(resp.Body)
			var got []string
			for len(got) < 3 {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("reading the first frame while upstream holds the second: %v (got %q)", err, got)
				}
				got = append(got, line)
			}
			if strings.Join(got, "") != "event: a\ndata: first\n\n" {
				t.Fatalf("first frame %q", got)
			}
		})
	}
}
