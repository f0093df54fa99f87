package mcp

import (
	"fmt"
	"sync"
	"time"
)

// Limits on what a server may send lev unasked. Each request lev refuses (or answers) is
// written to the run's record (mcp_requests.jsonl) and the daemon's log, and answered on
// the server's stdin or a POST: a server that asks without end would fill the disk and
// hold lev's memory and time. Real servers ask rarely: roots/list at the start and after
// a change, a sampling or elicitation request per call at most, a ping now and then.
// Past any limit the session is dropped for good (every later call fails saying why) and
// the server is closed (a stdio child killed); the request over the limit is refused and
// not recorded.
const (
	// MaxServerRequests bounds the requests (ping aside, which is never recorded) one
	// server may send in a session.
	MaxServerRequests = 256
	// ServerRequestBurst and ServerRequestRate bound how fast a server may send
	// requests, ping included: a burst of this many, then this many a second.
	ServerRequestBurst = 32
	ServerRequestRate  = 4
	// NotificationBurst and NotificationRate bound the notifications (progress, log
	// messages, list changes) a server may send: lev records none, but each is parsed
	// and dispatched. A long call's progress stays far below.
	NotificationBurst = 1024
	NotificationRate  = 256
)

// LimitError is a server dropped for what it sent lev unasked.
type LimitError struct {
	Server string
	Why    string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("MCP server %s: session dropped: %s", e.Server, e.Why)
}

// bucket is a token bucket: burst tokens, refilled at rate a second.
type bucket struct {
	tokens, burst, rate float64
	last                time.Time
}

func newBucket(burst, rate int) bucket {
	return bucket{tokens: float64(burst), burst: float64(burst), rate: float64(rate)}
}

func (b *bucket) take(now time.Time) bool {
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// inbound counts what one session's server sent unasked, against the limits above.
type inbound struct {
	mu       sync.Mutex
	server   string
	requests int // recorded ones: every request but ping
	req      bucket
	note     bucket
}

func newInbound(server string) *inbound {
	return &inbound{server: server, req: newBucket(ServerRequestBurst, ServerRequestRate), note: newBucket(NotificationBurst, NotificationRate)}
}

// admit counts one message from the server (method: its JSON-RPC method) and returns the
// limit it passes, or nil.
func (in *inbound) admit(method string, notification bool) error {
	return in.admitAt(method, notification, time.Now())
}

func (in *inbound) admitAt(method string, notification bool, now time.Time) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if notification {
		if !in.note.take(now) {
			return &LimitError{in.server, fmt.Sprintf("it sent notifications faster than lev's limit (%d at once, then %d a second; passed at %s)", NotificationBurst, NotificationRate, method)}
		}
		return nil
	}
	if !in.req.take(now) {
		return &LimitError{in.server, fmt.Sprintf("it sent requests faster than lev's limit (%d at once, then %d a second; passed at %s)", ServerRequestBurst, ServerRequestRate, method)}
	}
	if method == "ping" {
		return nil
	}
	if in.requests++; in.requests > MaxServerRequests {
		return &LimitError{in.server, fmt.Sprintf("it sent more than %d requests (lev's cap on one server's requests in a session; passed at %s)", MaxServerRequests, method)}
	}
	return nil
}
