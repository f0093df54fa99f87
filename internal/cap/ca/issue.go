package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"regexp"
	"time"
)

// IssueServerCertSANs mints a fresh key and a server certificate for the broker naming
// every DNS name and IP address a client may dial. Under closed egress an agent cannot
// resolve the alias name and dials the alias IP, so that IP must be an IP SAN or TLS fails.
func (c *CA) IssueServerCertSANs(names []string, ips []net.IP, ttl time.Duration) (*tls.Certificate, error) {
	if len(names) == 0 && len(ips) == 0 {
		return nil, errors.New("ca: a server certificate needs at least one DNS name or IP SAN")
	}
	if ttl <= 0 {
		ttl = DefaultServerTTL
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: generating server key: %w", err)
	}
	now := c.Now()
	cn := "lever broker"
	if len(names) > 0 {
		cn = names[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: mustSerial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"lever"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, key.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("ca: signing server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, c.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

var agentName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidAgentName reports whether name can be a certificate's CN and a ticket's owner.
func ValidAgentName(name string) error {
	if len(name) > 63 {
		// Never quote a long name back: it would cost every log that records the error.
		return fmt.Errorf("agent name of %d bytes is not valid (want lower-case letters, digits, '.', '_', '-'; at most 63 characters)", len(name))
	}
	if !agentName.MatchString(name) {
		return fmt.Errorf("agent name %q is not valid (want lower-case letters, digits, '.', '_', '-'; at most 63 characters)", name)
	}
	return nil
}

// ErrRevoked is wrapped by every refusal to issue because of a revocation.
var ErrRevoked = errors.New("revoked")

// ErrExpired refuses a renewal with a certificate outside its validity period.
var ErrExpired = errors.New("expired")

// IssueClient signs a client certificate for agent (CN) in role (OU) over the public key
// of csr. The CSR's own subject is ignored: identity comes from the ticket or the current
// certificate, never from what the client asks for. The key was made by the client and
// never leaves it. Every issued certificate is recorded so an agent can be revoked by name.
// IssueClient has no authorising credential to date, so it refuses any agent that was
// ever revoked by name; the broker uses EnrolClient and RenewClient.
func (c *CA) IssueClient(csr *x509.CertificateRequest, agent, role string, ttl time.Duration) ([]byte, *x509.Certificate, error) {
	return c.issueClient(csr, agent, role, ttl, func(r *registry) error {
		if at, ok := r.Agents[agent]; ok {
			return fmt.Errorf("ca: agent %q was %w by name at %s", agent, ErrRevoked, at.UTC().Format(time.RFC3339))
		}
		return nil
	})
}

// EnrolClient issues for a redeemed ticket made at ticketIssued. If the agent was revoked
// by name, only a ticket made after that revocation re-enrols it: one made before (and
// still pending, or redeemed while the revocation landed) is refused.
func (c *CA) EnrolClient(csr *x509.CertificateRequest, agent, role string, ttl time.Duration, ticketIssued time.Time) ([]byte, *x509.Certificate, error) {
	return c.issueClient(csr, agent, role, ttl, func(r *registry) error {
		if at, ok := r.Agents[agent]; ok && !ticketIssued.After(at) {
			return fmt.Errorf("ca: agent %q was %w by name at %s, after its ticket was made; enrol it with a new ticket", agent, ErrRevoked, at.UTC().Format(time.RFC3339))
		}
		return nil
	})
}

// RenewClient issues a successor to cur (a verified client certificate of this CA, within
// its validity period at c.Now) with the same CN and role, and retires cur: it is marked revoked in the same registry write
// that records the successor, so from then on cur is refused everywhere and a second
// renewal with it fails. It refuses when cur is revoked or was issued before its agent was
// revoked by name. The check runs under the registry lock together with signing and
// recording, so a revocation cannot slip in between the broker's peer check and issuance.
func (c *CA) RenewClient(csr *x509.CertificateRequest, cur *x509.Certificate, ttl time.Duration) ([]byte, *x509.Certificate, error) {
	agent, serial := cur.Subject.CommonName, SerialHex(cur.SerialNumber)
	return c.issueClient(csr, agent, Role(cur), ttl, func(r *registry) error {
		if _, ok := r.Revoked[serial]; ok {
			return fmt.Errorf("ca: client certificate %s (%s) is %w", serial, agent, ErrRevoked)
		}
		// An expired certificate renews nothing, whatever let it this far (a connection
		// whose handshake predates the expiry): checked on the CA's clock, with issuance.
		if now := c.Now(); now.After(cur.NotAfter) || now.Before(cur.NotBefore) {
			return fmt.Errorf("ca: client certificate %s (%s) is outside its validity period (%s to %s): %w", serial, agent,
				cur.NotBefore.UTC().Format(time.RFC3339), cur.NotAfter.UTC().Format(time.RFC3339), ErrExpired)
		}
		// Retire cur. r is saved only if the successor is signed and recorded, so a failed
		// renewal leaves cur working.
		r.Revoked[serial] = revoked{Agent: agent, At: c.Now(), NotAfter: cur.NotAfter}
		at, ok := r.Agents[agent]
		if !ok {
			return nil
		}
		// Without an exact record, NotBefore+backdate is the signing time truncated to the
		// second: never later than the truth, so the comparison errs towards refusing.
		issuedAt := cur.NotBefore.Add(backdate)
		for _, e := range r.Issued {
			if e.Serial == serial && !e.IssuedAt.IsZero() {
				issuedAt = e.IssuedAt
				break
			}
		}
		if !issuedAt.After(at) {
			return fmt.Errorf("ca: client certificate %s (%s) predates the revocation of agent %q at %s: %w", serial, agent, agent, at.UTC().Format(time.RFC3339), ErrRevoked)
		}
		return nil
	})
}

// issueClient validates, then holds the registry lock across allow, signing and recording:
// a revocation (which takes the same lock) either sees the new certificate and revokes it,
// or lands first and allow refuses.
func (c *CA) issueClient(csr *x509.CertificateRequest, agent, role string, ttl time.Duration, allow func(*registry) error) ([]byte, *x509.Certificate, error) {
	if err := ValidAgentName(agent); err != nil {
		return nil, nil, fmt.Errorf("ca: %w", err)
	}
	if role != RoleManager && role != RoleWorker {
		return nil, nil, fmt.Errorf("ca: role %q is not %s or %s", role, RoleManager, RoleWorker)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, nil, fmt.Errorf("ca: CSR signature: %w", err)
	}
	if err := checkLeafKey(csr.PublicKey); err != nil {
		return nil, nil, fmt.Errorf("ca: CSR key: %w", err)
	}
	if ttl <= 0 {
		ttl = DefaultClientTTL
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.loadRegistry()
	if err != nil {
		return nil, nil, err
	}
	if err := allow(r); err != nil {
		return nil, nil, err
	}
	now := c.Now()
	tmpl := &x509.Certificate{
		SerialNumber: mustSerial(),
		Subject:      pkix.Name{CommonName: agent, OrganizationalUnit: []string{role}, Organization: []string{"lever"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, csr.PublicKey, c.key)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: signing client certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	r.Issued = append(r.Issued, issued{Serial: SerialHex(leaf.SerialNumber), Agent: agent, Role: role, NotAfter: leaf.NotAfter, IssuedAt: now})
	if err := c.saveRegistry(r); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaf, nil
}

// NewKeyAndCSR makes a P-256 key and a CSR for it: what a worker runs on its own side.
func NewKeyAndCSR(agent string) (keyPEM, csrPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: agent}}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("making CSR: %w", err)
	}
	keyPEM, err = MarshalKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ParseCSRPEM parses a CERTIFICATE REQUEST block.
func ParseCSRPEM(data []byte) (*x509.CertificateRequest, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("no CERTIFICATE REQUEST PEM block")
	}
	return x509.ParseCertificateRequest(b.Bytes)
}

// Role returns the role (OU) of a client certificate lever issued.
func Role(cert *x509.Certificate) string {
	if len(cert.Subject.OrganizationalUnit) == 1 {
		return cert.Subject.OrganizationalUnit[0]
	}
	return ""
}

// CheckCSR validates a CSR (signature, key strength) without issuing anything, so a bad
// request is refused before a single-use ticket is spent on it.
func CheckCSR(csr *x509.CertificateRequest) error {
	if err := csr.CheckSignature(); err != nil {
		return fmt.Errorf("CSR signature: %w", err)
	}
	if err := checkLeafKey(csr.PublicKey); err != nil {
		return fmt.Errorf("CSR key: %w", err)
	}
	return nil
}
