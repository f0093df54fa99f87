package provider

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
)

// Retry is how a provider retries a model call the upstream turned away for now: HTTP 429
// (rate limited) and 5xx (Anthropic's 529 "overloaded" among them). Only the answer's
// status is retried: a call whose 2xx reply has started (a stream under way) is never
// sent again, since the model has then acted on it once, and a transport error is not
// retried either (the request may have reached the upstream).
type Retry struct {
	// Attempts is the most calls made in all (the first one included).
	Attempts int
	// Base is the first backoff; each next one doubles, up to Max. The wait is drawn
	// between half of that and all of it (jitter: clients turned away together do not
	// come back together).
	Base, Max time.Duration
	// MaxRetryAfter is the longest Retry-After honoured: an upstream that asks for a
	// longer wait gets no retry (the call fails, saying what it asked), rather than a run
	// that hangs for it or comes back early against the upstream's word.
	MaxRetryAfter time.Duration
	// Sleep waits d or until ctx ends (tests record the waits instead).
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock Retry-After dates are read against.
	Now func() time.Time
}

// DefaultRetry: 4 attempts, backoff 1 s doubling to 20 s, Retry-After up to 60 s.
var DefaultRetry = Retry{Attempts: 4, Base: time.Second, Max: 20 * time.Second, MaxRetryAfter: 60 * time.Second}

// StatusError is a non-2xx reply, after any retries.
type StatusError struct {
	Who      string
	Code     int
	Peer     string
	Body     string // the start of the reply, for the message
	Attempts int    // calls made
	// overCap: the reply's body broke a cap (capread) and was not read whole; such a
	// reply is not retried (a peer sending tens of MiB of error page gets one chance).
	overCap bool
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: HTTP %d from %s: %s", e.Who, e.Code, e.Peer, e.Body)
	if e.Attempts > 1 {
		s += fmt.Sprintf(" (after %d attempts)", e.Attempts)
	}
	return s
}

func retryable(code int) bool {
	return code == http.StatusTooManyRequests || code >= 500 && code <= 599
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP-date (RFC 9110 10.2.3).
// ok is false when there is none or it cannot be read (the backoff then applies).
func retryAfter(h string, now time.Time) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(h, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > 1<<31 {
			n = 1 << 31
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	if d := t.Sub(now); d > 0 {
		return d, true
	}
	return 0, true
}

// backoff is the wait before retry n (1-based).
func (r Retry) backoff(n int) time.Duration {
	d := r.Base
	for i := 1; i < n && d < r.Max; i++ {
		d *= 2
	}
	d = min(d, r.Max)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// do sends req until a reply is not retryable or the attempts are spent. A 2xx reply is
// returned unread; anything else becomes a *StatusError (the body's start read under the
// cap). req's body must be replayable (GetBody: a bytes.Reader's is).
func (r Retry) do(ctx context.Context, c *http.Client, who string, req *http.Request) (*http.Response, error) {
	if r.Attempts < 1 {
		r.Attempts = 1
	}
	sleep, now := r.Sleep, r.Now
	if sleep == nil {
		sleep = sleepCtx
	}
	if now == nil {
		now = time.Now
	}
	for attempt := 1; ; attempt++ {
		send := req
		if attempt > 1 {
			send = req.Clone(ctx)
			if req.GetBody != nil {
				b, err := req.GetBody()
				if err != nil {
					return nil, fmt.Errorf("%s: replaying the request body: %w", who, err)
				}
				send.Body = b
			}
		}
		resp, err := c.Do(send)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", who, err)
		}
		if resp.StatusCode/100 == 2 {
			return resp, nil
		}
		se := statusError(who, resp)
		se.Attempts = attempt
		if !retryable(resp.StatusCode) || se.overCap || attempt >= r.Attempts {
			return nil, se
		}
		wait := r.backoff(attempt)
		if ra, ok := retryAfter(resp.Header.Get("Retry-After"), now()); ok {
			if ra > r.MaxRetryAfter {
				return nil, fmt.Errorf("%w; it asks to retry after %s, longer than lev waits (%s)", se, ra.Round(time.Second), r.MaxRetryAfter)
			}
			wait = ra
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("%w; waiting to retry: %w", se, err)
		}
	}
}

// statusError reads (under the cap) and quotes the start of an error reply.
func statusError(who string, resp *http.Response) *StatusError {
	e := &StatusError{Who: who, Code: resp.StatusCode, Peer: capread.Peer(resp)}
	data, err := capread.Body(resp)
	if err != nil {
		e.Body, e.overCap = err.Error(), true
		return e
	}
	snip := strings.TrimSpace(string(data))
	if len(snip) > 300 {
		snip = snip[:300] + "…"
	}
	e.Body = snip
	return e
}
