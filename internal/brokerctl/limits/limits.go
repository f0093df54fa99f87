// Package limits holds the broker's connection and request limits: a listener that caps
// open connections and keeps quotas per handshake state and per client identity, and a
// per-key token bucket that also thins out the audit lines of what it refuses. Neither
// knows HTTP routes or the audit log: the broker wires them in.
package limits

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"sync"
	"time"
)

// Listener lets at most n accepted connections be open at once: Accept waits for
// one to close, so the excess waits in the kernel's backlog (and, since TLS runs after
// Accept, does not even get a handshake) instead of costing the broker a goroutine, a
// TLS state and buffers each.
//
// Every jail process reaches the broker from the same source address (the alias forwards
// to host loopback; a netns jail's containers share the guest's address), so a process
// without a client certificate (the workbench, say) competes with the agents for those n
// slots. Two smaller quotas keep it from taking them all: connections whose TLS handshake
// has not finished (maxPending), and connections that finished it without a certificate
// (maxUnauth). When a quota is full the oldest connection in it is closed to make room:
// a real handshake or enrolment takes milliseconds, so it is the stalled ones that go.
// Connections with a verified certificate count against n and against the quota of
// their identity (the certificate's CN, maxPerWho): one agent, or one stolen certificate,
// cannot take the slots of the others either.
type Listener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once

	mu         sync.Mutex
	maxPending int
	maxUnauth  int
	maxPerWho  int
	pending    []*Conn            // accepted, handshake not finished; oldest first
	unauth     []*Conn            // handshake finished without a client certificate; oldest first
	byWho      map[string][]*Conn // handshake finished with a verified certificate, per CN; oldest first
}

// NewListener wraps l: at most n connections open, at most maxPending whose handshake has
// not finished, maxUnauth that finished it without a certificate, maxPerWho per verified
// identity.
func NewListener(l net.Listener, n, maxPending, maxUnauth, maxPerWho int) *Listener {
	return &Listener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{}), maxPending: maxPending, maxUnauth: maxUnauth, maxPerWho: maxPerWho, byWho: map[string][]*Conn{}}
}

func (l *Listener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	lc := &Conn{Conn: c, l: l}
	l.mu.Lock()
	l.pending = append(l.pending, lc)
	evict := l.overflow(&l.pending, l.maxPending)
	l.mu.Unlock()
	if evict != nil {
		evict.Close()
	}
	return lc, nil
}

// overflow removes and returns a connection of *q to close when it holds more than max:
// the oldest one not serving a request (one in the middle of an enrolment is never cut),
// or, when every other one is, the newest. Called with mu held.
func (l *Listener) overflow(q *[]*Conn, max int) *Conn {
	if len(*q) <= max {
		return nil
	}
	pick := len(*q) - 1
	for i, c := range *q {
		if !c.busy {
			pick = i
			break
		}
	}
	old := (*q)[pick]
	*q = append((*q)[:pick], (*q)[pick+1:]...)
	return old
}

// ConnState follows net/http's view of each jail connection: one serving a request
// (StateActive) is not evicted from a quota.
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, ok := c.(*Conn)
	if !ok {
		return
	}
	l.mu.Lock()
	lc.busy = st == http.StateActive
	l.mu.Unlock()
}

// Handshook moves c out of the pending quota once its TLS handshake succeeded: into the
// unauthenticated one when it presented no certificate (leaf nil), else into its
// identity's. When that identity already holds maxPerWho connections its oldest idle one
// is closed; when all are serving requests c itself is refused (handshook returns false
// and the caller fails the handshake with an error naming the cap).
func (c *Conn) Handshook(leaf *x509.Certificate) bool {
	l := c.l
	l.mu.Lock()
	l.pending = remove(l.pending, c)
	var evict *Conn
	switch {
	case c.closed:
	case leaf == nil:
		l.unauth = append(l.unauth, c)
		evict = l.overflow(&l.unauth, l.maxUnauth)
	default:
		c.cert, c.who = leaf, leaf.Subject.CommonName
		q := append(l.byWho[c.who], c)
		evict = l.overflow(&q, l.maxPerWho)
		l.byWho[c.who] = q
	}
	l.mu.Unlock()
	if evict == c && leaf != nil {
		return false
	}
	if evict != nil {
		evict.Close()
	}
	return true
}

// Certified returns the open connections that presented a verified certificate.
func (l *Listener) Certified() []*Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*Conn
	for _, q := range l.byWho {
		out = append(out, q...)
	}
	return out
}

// Idle reports whether c is serving no request.
func (l *Listener) Idle(c *Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !c.busy
}

func remove(q []*Conn, c *Conn) []*Conn {
	for i, x := range q {
		if x == c {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}

func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// Conn is a connection Listener accepted.
type Conn struct {
	net.Conn
	l      *Listener
	once   sync.Once
	closed bool // guarded by l.mu
	busy   bool // serving a request (guarded by l.mu)
	// The verified client certificate and its CN, set once at the handshake (under l.mu).
	cert *x509.Certificate
	who  string
}

func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.closed = true
		c.l.pending = remove(c.l.pending, c)
		c.l.unauth = remove(c.l.unauth, c)
		if c.who != "" {
			if q := remove(c.l.byWho[c.who], c); len(q) > 0 {
				c.l.byWho[c.who] = q
			} else {
				delete(c.l.byWho, c.who)
			}
		}
		c.l.mu.Unlock()
		<-c.l.sem
	})
	return err
}

// Rate is a token bucket per key (a source IP, an identity). It also thins out the audit lines of what
// it refuses: at most one per key per logEvery, carrying the count of those left out, so a
// flood costs the audit log a line every few seconds rather than one per request.
type Rate struct {
	mu       sync.Mutex
	rate     float64 // tokens per second
	burst    float64
	logEvery time.Duration
	ips      map[string]*bucket
	now      func() time.Time
}

type bucket struct {
	tokens     float64
	last       time.Time
	lastLog    time.Time
	suppressed int
}

// MaxTracked bounds the keys a Rate keeps (and the audit thinner, keyed the same way);
// beyond it, idle entries are dropped.
const MaxTracked = 4096

// NewRate allows rate requests per second per key, burst at once; LogRefusal lets one
// refusal per key and logEvery through.
func NewRate(rate float64, burst int, logEvery time.Duration) *Rate {
	return &Rate{rate: rate, burst: float64(burst), logEvery: logEvery, ips: map[string]*bucket{}, now: time.Now}
}

func (l *Rate) get(ip string, now time.Time) *bucket {
	b := l.ips[ip]
	if b == nil {
		if len(l.ips) >= MaxTracked {
			for k, v := range l.ips {
				if now.Sub(v.last) > time.Minute {
					delete(l.ips, k)
				}
			}
			if len(l.ips) >= MaxTracked {
				// Every entry is busy: forget them all rather than grow; a flood from this
				// many addresses is refused by the connection cap anyway.
				l.ips = map[string]*bucket{}
			}
		}
		b = &bucket{tokens: l.burst, last: now}
		l.ips[ip] = b
	}
	return b
}

// Allow takes a token for ip.
func (l *Rate) Allow(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.get(ip, now)
	b.tokens += now.Sub(b.last).Seconds() * l.rate
	if b.tokens > l.burst {
		b.tokens = l.burst
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// LogRefusal says whether a refusal for ip gets an audit line, and how many refusals
// since the last line did not.
func (l *Rate) LogRefusal(ip string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.get(ip, now)
	if now.Sub(b.lastLog) < l.logEvery {
		b.suppressed++
		return false, 0
	}
	n := b.suppressed
	b.lastLog, b.suppressed = now, 0
	return true, n
}

// Cert is the verified client certificate c presented at its handshake (nil: none, or
// not finished).
func (c *Conn) Cert() *x509.Certificate {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	return c.cert
}

// Busy counts the connections of identity who that are serving a request.
func (l *Listener) Busy(who string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.byWho[who] {
		if c.busy {
			n++
		}
	}
	return n
}
