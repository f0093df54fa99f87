package brokerctl

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/brokerclient"
	"github.com/lever-jail/lever/internal/cap/ca"
	"github.com/lever-jail/lever/internal/cap/ticket"
)

// The enrolment API's wire types and client calls live in brokerclient (lev's guest-side
// helper uses them without linking the broker); these names keep the broker's side and
// its callers reading as before.
type (
	EnrolRequest = brokerclient.EnrolRequest
	RenewRequest = brokerclient.RenewRequest
	CertResponse = brokerclient.CertResponse
)

var (
	ClientTLSConfig = brokerclient.ClientTLSConfig
	Enrol           = brokerclient.Enrol
	Renew           = brokerclient.Renew
)

const smallBody = 64 << 10

// certBody bounds /enrol and /renew bodies: a P-256 CSR in PEM is about 500 bytes and a
// ticket 70, so 16 KiB leaves room for an RSA-4096 CSR and nothing more.
const certBody = 16 << 10

func (s *Server) handleEnrol(w http.ResponseWriter, r *http.Request) {
	var req EnrolRequest
	rec(r).Who = "enrol:?"
	if !decodeJSON(w, r, certBody, &req) {
		return
	}
	code, typ, msg, mint := s.checkEnrol(r, &req)
	if mint == nil {
		if code == http.StatusBadRequest || code == http.StatusForbidden {
			msg += s.enrolFailed(req.Ticket)
		}
		jsonError(w, r, code, typ, msg)
		return
	}
	s.issue(w, r, req.Agent, mint.role, mint.f)
}

type enrolMint struct {
	role string
	f    func() ([]byte, *x509.Certificate, error)
}

// checkEnrol validates an enrolment and redeems its ticket: it returns how to mint the
// certificate, or the refusal (status, error type, message).
func (s *Server) checkEnrol(r *http.Request, req *EnrolRequest) (int, string, string, *enrolMint) {
	// The name is checked before it is recorded or used anywhere: only a valid name (at
	// most 63 bytes of a strict charset) reaches the audit log.
	if err := ca.ValidAgentName(req.Agent); err != nil {
		return http.StatusBadRequest, "bad_request", err.Error(), nil
	}
	rec(r).Who = "enrol:" + req.Agent
	csr, err := ca.ParseCSRPEM([]byte(req.CSR))
	if err == nil {
		err = ca.CheckCSR(csr)
	}
	if err != nil {
		// Checked before the ticket is spent, so a broken client can retry (a few times:
		// enrolFailed).
		return http.StatusBadRequest, "bad_request", "csr: " + err.Error(), nil
	}
	if cn := csr.Subject.CommonName; cn != "" && cn != req.Agent {
		return http.StatusBadRequest, "bad_request", fmt.Sprintf("csr names %q, not agent %q", cn, req.Agent), nil
	}
	t, err := s.Tickets.Redeem(req.Ticket, req.Agent)
	if err != nil {
		if !isTicketRefusal(err) {
			s.opts.Logf("broker: %v", err)
			return http.StatusInternalServerError, "enrolment_refused", err.Error(), nil
		}
		return http.StatusForbidden, "enrolment_refused", err.Error(), nil
	}
	return 0, "", "", &enrolMint{t.Role, func() ([]byte, *x509.Certificate, error) {
		return s.CA.EnrolClient(csr, t.Agent, t.Role, s.opts.ClientCertTTL, t.Issued)
	}}
}

// enrolFailed counts a refused enrolment against its ticket when the ticket is still
// pending, and spends the ticket at MaxEnrolFailures. A pending ticket lets an enrolment
// past the per-address limit of unauthenticated requests (pendingEnrolment), so without
// this whoever holds one could send broken enrolments (a bad CSR, a wrong agent name)
// without end, each an audit line. It returns what the refusal's message adds.
func (s *Server) enrolFailed(tok string) string {
	if !s.Tickets.Pending(tok) {
		return ""
	}
	max := s.opts.MaxEnrolFailures
	s.enrolMu.Lock()
	s.enrolFails[tok]++
	n := s.enrolFails[tok]
	if n >= max {
		delete(s.enrolFails, tok)
	}
	s.enrolMu.Unlock()
	if n < max {
		return fmt.Sprintf("; failed enrolment %d of %d with this ticket (at %d it is spent)", n, max, max)
	}
	if err := s.Tickets.Burn(tok, fmt.Sprintf("%d failed enrolments", max)); err != nil && !isTicketRefusal(err) {
		s.opts.Logf("broker: %v", err)
		return fmt.Sprintf("; failed enrolment %d of %d with this ticket, which could not be spent: %v", n, max, err)
	}
	return fmt.Sprintf("; failed enrolment %d of %d with this ticket: the ticket is now spent, issue a new one", n, max)
}

func isTicketRefusal(err error) bool {
	for _, e := range []error{ticket.ErrUnknown, ticket.ErrUsed, ticket.ErrWrongAgent, ticket.ErrExpired, ticket.ErrMalformed, ticket.ErrBurned} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) {
	var req RenewRequest
	if !decodeJSON(w, r, certBody, &req) {
		return
	}
	csr, err := ca.ParseCSRPEM([]byte(req.CSR))
	if err == nil {
		err = ca.CheckCSR(csr)
	}
	if err != nil {
		jsonError(w, r, http.StatusBadRequest, "bad_request", "csr: "+err.Error())
		return
	}
	c := peerCert(r)
	if !s.renewLim.Allow(c.Subject.CommonName) {
		w.Header().Set("Retry-After", strconv.Itoa(int(1/s.opts.RenewRate)))
		jsonError(w, r, http.StatusTooManyRequests, "renew_rate", fmt.Sprintf("agent %s renews too often (at most %d at once, then one per %s)", c.Subject.CommonName, s.opts.RenewBurst, time.Duration(float64(time.Second)/s.opts.RenewRate)))
		return
	}
	if s.beforeIssue != nil {
		s.beforeIssue(c.Subject.CommonName)
	}
	// Identity and role carry over from the certificate presented, never from the CSR.
	// requirePeer's revocation check is not enough on its own: a revocation may land
	// between it and here, so RenewClient checks again atomically with issuance. It also
	// retires the presented certificate in the same step: a renewal replaces, never adds.
	s.issue(w, r, c.Subject.CommonName, ca.Role(c), func() ([]byte, *x509.Certificate, error) {
		return s.CA.RenewClient(csr, c, s.opts.ClientCertTTL)
	})
}

func (s *Server) issue(w http.ResponseWriter, r *http.Request, agent, role string, mint func() ([]byte, *x509.Certificate, error)) {
	certPEM, leaf, err := mint()
	if errors.Is(err, ca.ErrRevoked) {
		jsonError(w, r, http.StatusForbidden, "revoked", strings.TrimPrefix(err.Error(), "ca: "))
		return
	}
	if errors.Is(err, ca.ErrExpired) {
		w.Header().Set("Connection", "close")
		jsonError(w, r, http.StatusUnauthorized, "expired", strings.TrimPrefix(err.Error(), "ca: "))
		return
	}
	if err != nil {
		jsonError(w, r, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	rec(r).Detail = "issued " + ca.SerialHex(leaf.SerialNumber) + " to " + agent + " (" + role + ")"
	if c := peerCert(r); c != nil && r.URL.Path == "/renew" {
		rec(r).Detail += "; retired " + ca.SerialHex(c.SerialNumber)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(CertResponse{Cert: string(certPEM), CA: string(s.CA.CertPEM), NotAfter: leaf.NotAfter.UTC()})
}
