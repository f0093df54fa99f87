package ca

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"
)

// ServerCertSource hands the broker's TLS listener its certificate through
// tls.Config.GetCertificate, so a re-issued certificate takes effect on the next handshake
// without closing the listener. When a re-issue fails it keeps serving the cached
// certificate (still valid: re-issue starts well before expiry) and retries later.
type ServerCertSource struct {
	// Issue mints a new certificate; NewServerCertSource sets it to the CA's
	// IssueServerCertSANs. Tests replace it to make re-issue fail.
	Issue func() (*tls.Certificate, error)
	// RenewBefore: re-issue once less than this much validity is left.
	RenewBefore time.Duration
	// RetryEvery bounds how often a failing re-issue is retried.
	RetryEvery time.Duration
	// OnEvent, when set, is told of each re-issue and each failure (for the audit log).
	OnEvent func(event string, notAfter time.Time, err error)
	Now     func() time.Time

	mu        sync.Mutex
	cur       *tls.Certificate
	lastTry   time.Time
	lastErr   error
	reissues  int
	failures  int
	inFlight  bool
	inFlightC chan struct{}
}

// NewServerCertSource mints the first certificate (an error here is fatal: there is nothing
// to serve) via IssueServerCertSANs. Re-issue starts when a third of ttl is left.
func NewServerCertSource(c *CA, names []string, ips []net.IP, ttl time.Duration) (*ServerCertSource, error) {
	if ttl <= 0 {
		ttl = DefaultServerTTL
	}
	s := &ServerCertSource{
		Issue:       func() (*tls.Certificate, error) { return c.IssueServerCertSANs(names, ips, ttl) },
		RenewBefore: ttl / 3,
		RetryEvery:  time.Minute,
		Now:         c.Now,
	}
	cert, err := s.Issue()
	if err != nil {
		return nil, err
	}
	s.cur = cert
	return s, nil
}

// Current is the certificate being served.
func (s *ServerCertSource) Current() *tls.Certificate {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Stats reports re-issues done, failures seen and the last error.
func (s *ServerCertSource) Stats() (reissues, failures int, lastErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reissues, s.failures, s.lastErr
}

// GetCertificate is the tls.Config hook. It never blocks a handshake on minting: a due
// re-issue runs in the background while this handshake gets the cached certificate.
func (s *ServerCertSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	cur := s.cur
	due := s.dueLocked()
	s.mu.Unlock()
	if due {
		go s.Refresh(false)
	}
	return cur, nil
}

func (s *ServerCertSource) dueLocked() bool {
	if s.inFlight {
		return false
	}
	now := s.Now()
	if now.Before(s.cur.Leaf.NotAfter.Add(-s.RenewBefore)) {
		return false
	}
	return s.lastTry.IsZero() || now.Sub(s.lastTry) >= s.RetryEvery
}

// Refresh re-issues the certificate when it is due, or always when force is set (the admin
// "rotate"). On failure the cached certificate stays in place and the error is returned.
func (s *ServerCertSource) Refresh(force bool) error {
	s.mu.Lock()
	if s.inFlight {
		c := s.inFlightC
		s.mu.Unlock()
		<-c
		s.mu.Lock()
		err := s.lastErr
		s.mu.Unlock()
		return err
	}
	if !force && !s.dueLocked() {
		s.mu.Unlock()
		return nil
	}
	s.inFlight, s.inFlightC = true, make(chan struct{})
	s.lastTry = s.Now()
	s.mu.Unlock()

	cert, err := s.Issue()
	if err == nil && cert.Leaf == nil {
		err = fmt.Errorf("ca: re-issued certificate has no parsed leaf")
	}

	s.mu.Lock()
	if err != nil {
		s.failures++
		s.lastErr = fmt.Errorf("re-issuing the broker server certificate (still serving the one valid until %s): %w", s.cur.Leaf.NotAfter.UTC().Format(time.RFC3339), err)
		err = s.lastErr
	} else {
		s.cur = cert
		s.reissues++
		s.lastErr = nil
	}
	notAfter := s.cur.Leaf.NotAfter
	s.inFlight = false
	close(s.inFlightC)
	on := s.OnEvent
	s.mu.Unlock()
	if on != nil {
		ev := "server-cert-reissued"
		if err != nil {
			ev = "server-cert-reissue-failed"
		}
		on(ev, notAfter, err)
	}
	return err
}

// Run checks every interval whether a re-issue is due, so a broker with no handshakes
// still renews in time. It returns when ctx is done.
func (s *ServerCertSource) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Refresh(false)
		}
	}
}
