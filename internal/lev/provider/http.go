package provider

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"
)

// TLSFiles configures mTLS to an endpoint such as lever's broker: a client certificate and
// key, and a CA file that replaces the system roots.
type TLSFiles struct {
	Cert, Key, CA string
}

// NewHTTPClient builds the client providers and web tools use: redirects only to the same
// origin (scheme, host and port), optional client certificate and private CA.
func NewHTTPClient(tf TLSFiles, timeout time.Duration) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the jail's egress is the firewall's business, not an env var's
	if tf.Cert != "" || tf.CA != "" {
		// The session cache lets a new connection to the broker resume its TLS session
		// rather than repeat the full mTLS handshake (issue 30: ~0.4 ms less per new
		// connection here); the broker re-checks the certificate on every resumption.
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(16)}
		if tf.Cert != "" {
			kp, err := tls.LoadX509KeyPair(tf.Cert, tf.Key)
			if err != nil {
				return nil, fmt.Errorf("loading client certificate %s: %w", tf.Cert, err)
			}
			cfg.Certificates = []tls.Certificate{kp}
		}
		if tf.CA != "" {
			pem, err := os.ReadFile(tf.CA)
			if err != nil {
				return nil, fmt.Errorf("reading CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s: no PEM certificates", tf.CA)
			}
			cfg.RootCAs = pool
		}
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: SameOrigin}, nil
}

// ErrCrossOrigin is a refused redirect.
var ErrCrossOrigin = errors.New("redirect to another origin refused")

// SameOrigin is an http.Client CheckRedirect that follows a redirect only to the origin of
// the first request.
func SameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	first := via[0].URL
	if req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return fmt.Errorf("%w: %s://%s to %s://%s", ErrCrossOrigin, first.Scheme, first.Host, req.URL.Scheme, req.URL.Host)
	}
	return nil
}
