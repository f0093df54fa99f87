package brokerctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
	"github.com/lever-jail/lever/internal/cap/ticket"
)

// EnrolRequest is the body of POST /enrol.
type EnrolRequest struct {
	Agent  string `json:"agent"`
	Ticket string `json:"ticket"`
	CSR    string `json:"csr"` // PEM; the key stays with the client
}

// RenewRequest is the body of POST /renew.
type RenewRequest struct {
	CSR string `json:"csr"`
}

// CertResponse answers /enrol and /renew.
type CertResponse struct {
	Cert     string    `json:"cert"`
	CA       string    `json:"ca"`
	NotAfter time.Time `json:"not_after"`
}

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

// ClientTLSConfig trusts only lever's CA (caPEM) and, when certPEM/keyPEM are given,
// presents that client certificate. It is what lev and bring-up use to talk to the broker.
func ClientTLSConfig(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("broker client: no CA certificate in the given PEM")
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("broker client: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Enrol redeems a ticket at brokerURL (https://<alias>:<port>) for a client certificate.
// The key is generated here and never sent; only its CSR is. caPEM is lever's CA
// certificate, the only root trusted, so the broker is authenticated before the ticket is
// sent.
func Enrol(ctx context.Context, brokerURL string, caPEM []byte, agent, tkt string) (certPEM, keyPEM []byte, err error) {
	keyPEM, csrPEM, err := ca.NewKeyAndCSR(agent)
	if err != nil {
		return nil, nil, err
	}
	tc, err := ClientTLSConfig(caPEM, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	var out CertResponse
	if err := postJSON(ctx, tc, strings.TrimSuffix(brokerURL, "/")+"/enrol", EnrolRequest{Agent: agent, Ticket: strings.TrimSpace(tkt), CSR: string(csrPEM)}, &out); err != nil {
		return nil, nil, fmt.Errorf("enrolling %s: %w", agent, err)
	}
	return []byte(out.Cert), keyPEM, nil
}

// Renew trades a live client certificate for a fresh one over a new key.
func Renew(ctx context.Context, brokerURL string, caPEM, certPEM, keyPEM []byte) (newCertPEM, newKeyPEM []byte, err error) {
	cur, err := ca.ParseCertPEM(certPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("renewing: current certificate: %w", err)
	}
	newKeyPEM, csrPEM, err := ca.NewKeyAndCSR(cur.Subject.CommonName)
	if err != nil {
		return nil, nil, err
	}
	tc, err := ClientTLSConfig(caPEM, certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	var out CertResponse
	if err := postJSON(ctx, tc, strings.TrimSuffix(brokerURL, "/")+"/renew", RenewRequest{CSR: string(csrPEM)}, &out); err != nil {
		return nil, nil, fmt.Errorf("renewing %s: %w", cur.Subject.CommonName, err)
	}
	return []byte(out.Cert), newKeyPEM, nil
}

func postJSON(ctx context.Context, tc *tls.Config, url string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, Proxy: nil}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, smallBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("%s: %s", resp.Status, e.Error.Message)
		}
		return fmt.Errorf("%s", resp.Status)
	}
	return json.Unmarshal(data, out)
}
