package brokerctl

import (
	"context"
	"crypto/x509"
	"errors"
	"sync"
	"time"
)

// Revocation and expiry are checked when a request starts (requirePeer); a model answer
// can then stream for many minutes. The broker also keeps the /llm/ requests in flight
// with the certificate each came with, and a watcher re-checks those certificates every
// revokeCheckEvery (and at once after an admin revocation): a request whose certificate
// has been revoked or has expired is cancelled, which cuts the upstream call and aborts
// the answer.

// revokeCheckEvery is how often the certificates of requests in flight are re-checked.
const revokeCheckEvery = time.Second

// errRevokedInFlight is the cancellation cause of a request whose certificate was revoked.
var errRevokedInFlight = errors.New("client certificate revoked while the request was in flight")

type inflightReq struct {
	cert   *x509.Certificate
	cancel context.CancelCauseFunc
}

type inflightSet struct {
	mu   sync.Mutex
	reqs map[*inflightReq]struct{}
	poke chan struct{}
}

func newInflightSet() *inflightSet {
	return &inflightSet{reqs: map[*inflightReq]struct{}{}, poke: make(chan struct{}, 1)}
}

// track registers a request; the returned context is cancelled (cause errRevokedInFlight)
// if cert is revoked before done is called.
func (s *inflightSet) track(parent context.Context, cert *x509.Certificate) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	r := &inflightReq{cert: cert, cancel: cancel}
	s.mu.Lock()
	s.reqs[r] = struct{}{}
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		delete(s.reqs, r)
		s.mu.Unlock()
		cancel(nil)
	}
}

// check cancels every request in flight whose certificate refuse has a cause for (that
// cause: errRevokedInFlight or errExpiredInFlight). Each distinct certificate is looked up
// once.
func (s *inflightSet) check(refuse func(*x509.Certificate) error) {
	s.mu.Lock()
	byCert := map[*x509.Certificate][]*inflightReq{}
	for r := range s.reqs {
		byCert[r.cert] = append(byCert[r.cert], r)
	}
	s.mu.Unlock()
	for c, rs := range byCert {
		if cause := refuse(c); cause != nil {
			for _, r := range rs {
				r.cancel(cause)
			}
		}
	}
}

// run re-checks until ctx ends.
func (s *inflightSet) run(ctx context.Context, refuse func(*x509.Certificate) error) {
	t := time.NewTicker(revokeCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.poke:
		}
		s.check(refuse)
	}
}

// recheck asks the watcher for a check now (after a revocation).
func (s *inflightSet) recheck() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}
