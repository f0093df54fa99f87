package brokerctl

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/limits"
)

// auditThinner bounds the audit lines any one client can make the broker write. Every
// request on the jail listener leaves a line (audited), and a client can repeat most of
// them at will: a refusal (a revoked or expired certificate's request, a route that does
// not exist, a broken enrolment), an error, a health check. Those lines are thinned per
// key, the client certificate's CN or, without one, the source address: a token bucket
// (burst, then rate a second), and the lines it leaves out are counted. The count rides
// on the key's next line that gets through, or, when none comes, on a summary line
// ("audit-thinning", outcome "thinned") that flushEvery writes, so nothing goes uncounted.
//
// Lines that cost something real are never thinned: a successful model request (the key
// was used), enrolment (a ticket was spent) or renewal (a certificate was issued; renewals
// have their own limit). Two sources also keep their own, stricter, gate (one line per 10 s
// past a burst): failed handshakes (serverLog) and requests refused by the per-address
// limit (jailHandler); what they leave out is counted here (drop).
type auditThinner struct {
	mu    sync.Mutex
	rate  float64
	burst float64
	now   func() time.Time
	keys  map[string]*thinKey
}

type thinKey struct {
	who, remote string // for the summary line
	tokens      float64
	last        time.Time
	dropped     int
	since       time.Time // first line left out since the last count was written
}

// flushEvery is how often the counts of left-out lines are written as summary lines.
const flushEvery = 10 * time.Second

func newAuditThinner(rate float64, burst int, now func() time.Time) *auditThinner {
	return &auditThinner{rate: rate, burst: float64(burst), now: now, keys: map[string]*thinKey{}}
}

// thinnable says whether r is a line a client can repeat at will.
func thinnable(r *Record) bool {
	if r.Listener != "jail" {
		return false
	}
	if r.Outcome != "ok" {
		return true
	}
	return !(strings.HasPrefix(r.Route, "/llm/") || r.Route == "/enrol" || r.Route == "/renew")
}

// thinKeyOf is the key r is thinned under: the certificate's CN, else the source address.
// The CN is the one audited took from the certificate (r.peer): a handler may rewrite
// r.Who from the request (/enrol records "enrol:<agent>", a name the client picks).
func thinKeyOf(r *Record) (key, who, remote string) {
	if r.peer != "" {
		return "cert " + r.peer, r.peer, ""
	}
	ip := remoteIP(r.Remote)
	return "addr " + ip, "-", ip
}

// admit decides r's line: dropped (r.skip set, counted) or written, with the count of
// lines left out before it added to its detail.
func (t *auditThinner) admit(r *Record) {
	if r.skip || !thinnable(r) {
		return
	}
	key, who, remote := thinKeyOf(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	k := t.keyLocked(key, who, remote, now)
	k.tokens = min(t.burst, k.tokens+now.Sub(k.last).Seconds()*t.rate)
	k.last = now
	if k.tokens < 1 {
		if k.dropped == 0 {
			k.since = now
		}
		k.dropped++
		r.skip = true
		return
	}
	k.tokens--
	if k.dropped > 0 {
		sep := ""
		if r.Detail != "" {
			sep = "; "
		}
		r.Detail += sep + t.countText(k)
		k.dropped = 0
	}
}

// drop leaves r out, counted under its key: for sources that decide themselves which of
// their lines to write (failed handshakes, requests over the per-address limit), so the
// lines they leave out are counted and reported like the thinner's own.
func (t *auditThinner) drop(r *Record) {
	r.skip = true
	key, who, remote := thinKeyOf(r)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	k := t.keyLocked(key, who, remote, now)
	if k.dropped == 0 {
		k.since = now
	}
	k.dropped++
}

// keyLocked returns key's entry, made when missing.
func (t *auditThinner) keyLocked(key, who, remote string, now time.Time) *thinKey {
	k := t.keys[key]
	if k == nil {
		if len(t.keys) >= limits.MaxTracked {
			t.evictLocked(now)
		}
		k = &thinKey{who: who, remote: remote, tokens: t.burst, last: now}
		t.keys[key] = k
	}
	return k
}

func (t *auditThinner) countText(k *thinKey) string {
	return fmt.Sprintf("%d similar audit lines left out since %s (repeatable requests are logged at most %g at once, then %g a second, per identity or source address)",
		k.dropped, k.since.UTC().Format(time.RFC3339), t.burst, t.rate)
}

// evictLocked forgets keys with nothing to report that have been quiet for a minute, or,
// when every key is busy, all keys with nothing to report (counts are never dropped; they
// are bounded by the keys that can have them).
func (t *auditThinner) evictLocked(now time.Time) {
	for key, k := range t.keys {
		if k.dropped == 0 && now.Sub(k.last) > time.Minute {
			delete(t.keys, key)
		}
	}
	if len(t.keys) >= limits.MaxTracked {
		// Every entry is busy: the counts still to report move to one shared entry, so
		// the table stays bounded and no count is lost.
		other := t.keys[otherKey]
		if other == nil {
			other = &thinKey{who: "-", remote: "many sources", last: now, since: now}
		}
		for key, k := range t.keys {
			if key == otherKey {
				continue
			}
			if k.dropped > 0 {
				if other.dropped == 0 || k.since.Before(other.since) {
					other.since = k.since
				}
				other.dropped += k.dropped
			}
			delete(t.keys, key)
		}
		t.keys[otherKey] = other
	}
}

// otherKey holds the counts of keys forgotten when the table was full.
const otherKey = "other"

// flush writes a summary line for each key whose left-out lines have not been counted
// yet, once they are flushEvery old (or all of them, with force: at shutdown).
func (t *auditThinner) flush(a *Audit, force bool) {
	t.mu.Lock()
	now := t.now()
	var out []Record
	for key, k := range t.keys {
		if k.dropped == 0 || (!force && now.Sub(k.since) < flushEvery) {
			continue
		}
		out = append(out, Record{Time: now, Who: k.who, Remote: k.remote, Listener: "jail", Route: "audit-thinning", Outcome: "thinned", Detail: t.countText(k)})
		k.dropped = 0
		if len(t.keys) > limits.MaxTracked/2 {
			delete(t.keys, key)
		}
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Who+out[i].Remote < out[j].Who+out[j].Remote })
	for _, r := range out {
		a.Log(r)
	}
}

// run flushes every flushEvery until ctx ends.
func (t *auditThinner) run(ctx context.Context, a *Audit) {
	tk := time.NewTicker(flushEvery)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
			t.flush(a, false)
		}
	}
}

// remoteIP is the address part of a host:port.
func remoteIP(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
