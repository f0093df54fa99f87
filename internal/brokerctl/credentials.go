package brokerctl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"
	"time"
)

// Credentials is an agent's client identity toward the broker, kept fresh: the TLS
// config it hands out presents the current certificate at every handshake
// (GetClientCertificate), and Run renews it over /renew, with a new key, once less than
// RenewBefore of its validity is left. A failed renewal keeps the current certificate and
// is retried, so an agent keeps working until the certificate really expires.
type Credentials struct {
	BrokerURL   string
	CAPEM       []byte
	RenewBefore time.Duration // default 4h (a third of the default 12h lifetime)
	RetryEvery  time.Duration // default 1 min
	// OnRenew, when set, receives each new pair (e.g. to persist it in the agent's tmpfs).
	OnRenew func(certPEM, keyPEM []byte, err error)

	// swap is held (write) for the whole of a renewal and (read) by every handshake: the
	// broker retires the presented certificate the moment it issues the successor, so a
	// handshake must not pick the old one while the new one is on its way back.
	swap    sync.RWMutex
	mu      sync.Mutex
	certPEM []byte
	keyPEM  []byte
	pair    *tls.Certificate
}

// NewCredentials starts from an enrolled pair.
func NewCredentials(brokerURL string, caPEM, certPEM, keyPEM []byte) (*Credentials, error) {
	c := &Credentials{BrokerURL: brokerURL, CAPEM: caPEM, RenewBefore: 4 * time.Hour, RetryEvery: time.Minute}
	if err := c.set(certPEM, keyPEM); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Credentials) set(certPEM, keyPEM []byte) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.certPEM, c.keyPEM, c.pair = certPEM, keyPEM, &pair
	return nil
}

// Current returns the certificate in use.
func (c *Credentials) Current() *x509.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pair.Leaf
}

// TLSConfig trusts only lever's CA and presents the current certificate.
func (c *Credentials) TLSConfig() (*tls.Config, error) {
	tc, err := ClientTLSConfig(c.CAPEM, nil, nil)
	if err != nil {
		return nil, err
	}
	// No session resumption: a resumed session carries the certificate of the handshake
	// that made it, so after a renewal (which retires the old certificate) every new
	// connection would resume with the retired one and be refused, never presenting the
	// new one (TestCredentialsRenewBeforeExpiry).
	tc.ClientSessionCache = nil
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c.swap.RLock()
		defer c.swap.RUnlock()
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pair, nil
	}
	return tc, nil
}

// RenewNow renews once. The broker retires the current certificate as it issues the new
// one, so connections made with the old one are refused from then on: a client keeping
// connections alive should drop them in OnRenew (http.Transport.CloseIdleConnections).
func (c *Credentials) RenewNow(ctx context.Context) error {
	nc, nk, err := c.renew(ctx)
	if c.OnRenew != nil {
		c.OnRenew(nc, nk, err)
	}
	return err
}

func (c *Credentials) renew(ctx context.Context) ([]byte, []byte, error) {
	c.swap.Lock()
	defer c.swap.Unlock()
	c.mu.Lock()
	certPEM, keyPEM := c.certPEM, c.keyPEM
	c.mu.Unlock()
	nc, nk, err := Renew(ctx, c.BrokerURL, c.CAPEM, certPEM, keyPEM)
	if err == nil {
		err = c.set(nc, nk)
	}
	return nc, nk, err
}

// Run renews whenever due until ctx ends.
func (c *Credentials) Run(ctx context.Context) error {
	for {
		wait := time.Until(c.Current().NotAfter.Add(-c.RenewBefore))
		if wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		if err := c.RenewNow(ctx); err != nil {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return ctx.Err()
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(c.RetryEvery):
			}
		}
	}
}
