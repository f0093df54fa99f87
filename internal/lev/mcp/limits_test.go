package mcp

import (
	"strings"
	"testing"
	"time"
)

// TestInboundLimits: the limits on what a server sends unasked, on a clock the test
// moves (the whole-run test, mcprun.TestServerFloodDropped, cannot wait out the count
// cap at the allowed rate). Each row sends messages spaced by gap and wants the first
// refusal at message n (0: none); the controls stay under each limit by one.
func TestInboundLimits(t *testing.T) {
	cases := []struct {
		name, method string
		note         bool
		gap          time.Duration
		send, n      int
		want         string
	}{
		{"control: a burst of requests", "sampling/createMessage", false, 0, ServerRequestBurst, 0, ""},
		{"one request past the burst", "sampling/createMessage", false, 0, ServerRequestBurst + 1, ServerRequestBurst + 1, "it sent requests faster than lev's limit (32 at once, then 4 a second; passed at sampling/createMessage)"},
		{"pings count against the rate", "ping", false, 0, ServerRequestBurst + 1, ServerRequestBurst + 1, "requests faster than lev's limit"},
		{"control: pings at the rate are never capped", "ping", false, time.Second / ServerRequestRate, MaxServerRequests + 10, 0, ""},
		{"control: requests at the rate up to the cap", "roots/list", false, time.Second / ServerRequestRate, MaxServerRequests, 0, ""},
		{"requests at the rate past the cap", "roots/list", false, time.Second / ServerRequestRate, MaxServerRequests + 1, MaxServerRequests + 1, "it sent more than 256 requests (lev's cap on one server's requests in a session; passed at roots/list)"},
		{"control: a burst of notifications", "notifications/progress", true, 0, NotificationBurst, 0, ""},
		{"one notification past the burst", "notifications/progress", true, 0, NotificationBurst + 1, NotificationBurst + 1, "notifications faster than lev's limit (1024 at once, then 256 a second"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := newInbound("srv")
			now := time.Unix(1e9, 0)
			for i := 1; i <= tc.send; i++ {
				err := in.admitAt(tc.method, tc.note, now)
				now = now.Add(tc.gap)
				if err == nil {
					continue
				}
				if i != tc.n || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "MCP server srv: session dropped: ") {
					t.Fatalf("message %d refused: %v\nwant at %d: %q", i, err, tc.n, tc.want)
				}
				return
			}
			if tc.n != 0 {
				t.Fatalf("all %d admitted; want a refusal at %d", tc.send, tc.n)
			}
		})
	}
}

// TestCutMethod: a server's method name is recorded and logged cut to 128 bytes, on a
// character boundary. Control: a short name passes unchanged.
func TestCutMethod(t *testing.T) {
	if got := cutMethod("sampling/createMessage"); got != "sampling/createMessage" {
		t.Fatalf("control: %q", got)
	}
	long := strings.Repeat("é", 200)
	got := cutMethod(long)
	if len(got) > maxMethod+len("…") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Fatalf("cut %d bytes: %q", len(got), got)
	}
}
