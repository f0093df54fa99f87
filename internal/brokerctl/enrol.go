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
	// The name is checked before it is recorded or used anywhere: only a valid name (at
	// most 63 bytes of a strict charset) reaches the audit log.
	if err := ca.ValidAgentName(req.Agent); err != nil {
		jsonError(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	rec(r).Who = "enrol:" + req.Agent
	csr, err := ca.ParseCSRPEM([]byte(req.CSR))
	if err == nil {
		err = ca.CheckCSR(csr)
	}
	if err != nil {
		// Checked before the ticket is spent, so a broken client can retry.
		jsonError(w, r, http.StatusBadRequest, "bad_request", "csr: "+err.Error())
		return
	}
	if cn := csr.Subject.CommonName; cn != "" && cn != req.Agent {
		jsonError(w, r, http.StatusBadRequest, "bad_request", fmt.Sprintf("csr names %q, not agent %q", cn, req.Agent))
		return
	}
	t, err := s.Tickets.Redeem(req.Ticket, req.Agent)
	if err != nil {
		code := http.StatusForbidden
		if !isTicketRefusal(err) {
			code = http.StatusInternalServerError
			s.opts.Logf("broker: %v", err)
		}
		jsonError(w, r, code, "enrolment_refused", err.Error())
		return
	}
	s.issue(w, r, t.Agent, t.Role, func() ([]byte, *x509.Certificate, error) {
		return s.CA.EnrolClient(csr, t.Agent, t.Role, s.opts.ClientCertTTL, t.Issued)
	})
}

func isTicketRefusal(err error) bool {
	for _, e := range []error{ticket.ErrUnknown, ticket.ErrUsed, ticket.ErrWrongAgent, ticket.ErrExpired, ticket.ErrMalformed} {
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
	if !s.renewLim.allow(c.Subject.CommonName) {
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
