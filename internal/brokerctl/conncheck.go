package brokerctl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/limits"
	"github.com/lever-jail/lever/internal/cap/ca"
)

// A client certificate is checked at three points, all against the broker's one clock
// (Options.Now):
//
//   - the handshake: crypto/tls checks the chain's validity period (tls.Config.Time), and
//     verifyPeer refuses a revoked certificate, so it never holds a connection;
//   - every request (requirePeer, through peerRefusal): a connection outlives its
//     handshake (HTTP/1.1 keep-alive, HTTP/2), so a certificate that expired or was
//     revoked since is refused on the next request, and the connection is closed after
//     the answer;
//   - checkConns, every ConnCheckEvery: an idle connection whose certificate expired or
//     was revoked is closed, so it holds no slot until the idle timeout; a request still
//     running on one (a model answer streaming) is cut by the in-flight watcher
//     (inflight.go), after which its connection is idle and closed here.

// errExpiredInFlight is the cancellation cause of a request whose certificate expired.
var errExpiredInFlight = errors.New("client certificate expired while the request was in flight")

// peerError is why a verified certificate is refused now: the HTTP status and error type
// requirePeer answers with, and the message (which the handshake refusal carries too).
type peerError struct {
	code int
	typ  string
	msg  string
}

func (e *peerError) Error() string { return e.msg }

// leafOf is the verified client certificate of a connection, or nil.
func leafOf(cs tls.ConnectionState) *x509.Certificate {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}

// certTimeRefusal says whether c is outside its validity period at now.
func certTimeRefusal(c *x509.Certificate, now time.Time) *peerError {
	id := ca.SerialHex(c.SerialNumber) + " (" + c.Subject.CommonName + ")"
	if now.After(c.NotAfter) {
		return &peerError{http.StatusUnauthorized, "expired", fmt.Sprintf("client certificate %s expired at %s; enrol again with a new ticket", id, c.NotAfter.UTC().Format(time.RFC3339))}
	}
	if now.Before(c.NotBefore) {
		return &peerError{http.StatusUnauthorized, "not_yet_valid", fmt.Sprintf("client certificate %s is not valid before %s", id, c.NotBefore.UTC().Format(time.RFC3339))}
	}
	return nil
}

// peerRefusal is why c (verified at its handshake) may not be used now, or nil.
func (s *Server) peerRefusal(c *x509.Certificate) *peerError {
	if e := certTimeRefusal(c, s.opts.Now()); e != nil {
		return e
	}
	revoked, err := s.CA.IsRevoked(c)
	if err != nil {
		s.opts.Logf("broker: %v", err)
		return &peerError{http.StatusServiceUnavailable, "internal", "revocation state unreadable; refusing"}
	}
	if revoked {
		return &peerError{http.StatusForbidden, "revoked", "client certificate " + ca.SerialHex(c.SerialNumber) + " (" + c.Subject.CommonName + ") is revoked"}
	}
	return nil
}

// verifyPeer is the jail listener's tls.Config.VerifyConnection: a verified certificate
// that is revoked fails the handshake (crypto/tls has already checked its validity period
// against the broker's clock). The error text reaches the audit log as the handshake's
// refusal (serverLog, thinned per source address).
func (s *Server) verifyPeer(cs tls.ConnectionState) error {
	leaf := leafOf(cs)
	if leaf == nil {
		return nil
	}
	if e := s.peerRefusal(leaf); e != nil {
		return e
	}
	return nil
}

// checkedPeer refuses, before any route sees it, a request whose certificate has expired
// or been revoked since its handshake: every route, /enrol and unknown paths included
// (requirePeer checks again for the routes that need a certificate).
func (s *Server) checkedPeer(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c := peerCert(r); c != nil {
			if e := s.peerRefusal(c); e != nil {
				w.Header().Set("Connection", "close")
				jsonError(w, r, e.code, e.typ, e.msg)
				return
			}
		}
		h(w, r)
	}
}

// inflightRefusal is the cancellation cause for a request in flight with c, or nil.
func (s *Server) inflightRefusal(c *x509.Certificate) error {
	if certTimeRefusal(c, s.opts.Now()) != nil {
		return errExpiredInFlight
	}
	if revoked, err := s.CA.IsRevoked(c); err == nil && revoked {
		return errRevokedInFlight
	}
	return nil
}

// checkConns closes, every ConnCheckEvery until ctx ends, each idle jail connection
// whose certificate has expired or been revoked since its handshake.
func (s *Server) checkConns(ctx context.Context, l *limits.Listener) {
	t := time.NewTicker(s.opts.ConnCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.closeRefusedConns(l)
	}
}

// closeRefusedConns is one sweep of checkConns. Each distinct certificate is looked up
// once; every closed connection leaves an audit line (one per certificate and sweep).
func (s *Server) closeRefusedConns(l *limits.Listener) {
	verdict := map[*x509.Certificate]*peerError{}
	closed := map[*x509.Certificate]int{}
	var order []*x509.Certificate
	for _, c := range l.Certified() {
		cert := c.Cert()
		e, seen := verdict[cert]
		if !seen {
			e = s.peerRefusal(cert)
			verdict[cert] = e
		}
		// An unreadable registry closes nothing: it refuses each request instead.
		if e == nil || e.typ == "internal" || !l.Idle(c) {
			continue
		}
		c.Close()
		if closed[cert] == 0 {
			order = append(order, cert)
		}
		closed[cert]++
	}
	for _, c := range order {
		s.audit.Log(Record{Who: c.Subject.CommonName, Serial: ca.SerialHex(c.SerialNumber), Listener: "jail", Route: "connection", Outcome: "closed",
			Detail: fmt.Sprintf("%d idle connection(s) closed: %s", closed[c], verdict[c].msg)})
	}
}
