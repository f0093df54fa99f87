// Package brokerclient is the client side of the broker's enrolment API: the wire types
// of /enrol and /renew and the calls that redeem a ticket or renew a certificate. It is
// its own package so the guest-side helper in lev can enrol without linking the broker
// (and, through it, the podman bindings).
//
// It owns only the client side of that wire; it must not hold or read an API key, and
// must not trust a broker whose certificate the instance's CA did not sign.
package brokerclient

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
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
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

// sessionCacheSize is how many broker sessions a client remembers (one broker, a few
// server names at most).
const sessionCacheSize = 8

// maxAnswer bounds what a client reads of the broker's answer.
const maxAnswer = 64 << 10

// ClientTLSConfig trusts only lever's CA (caPEM) and, when certPEM/keyPEM are given,
// presents that client certificate. It is what lev and bring-up use to talk to the broker.
// It keeps a TLS session cache, so a new connection resumes the session instead of a full
// handshake (BenchmarkBrokerOverhead: resumed against newconn); the broker still checks
// the certificate the session carries on every resumption (revoked: refused, see
// TestRevokedCertCannotResumeSession).
func ClientTLSConfig(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("broker client: no CA certificate in the given PEM")
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, ClientSessionCache: tls.NewLRUClientSessionCache(sessionCacheSize)}
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
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
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
