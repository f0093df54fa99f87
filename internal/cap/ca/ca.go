// Package ca is lever's small certificate authority. It lives on the host under the
// instance's state dir, is made on first use, and signs the broker's server certificate
// and the short-lived client certificates of the manager and the workers. Nothing in it
// ever enters the guest except the CA certificate (public) and leaf certificates.
//
// It owns the CA's files under <state>/ca and must not hand out its private key: callers
// get certificates, never the signer.
package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// File names inside the CA directory.
const (
	CertFile = "ca.crt"
	KeyFile  = "ca.key"
)

// Validity defaults. Client certificates are short-lived on purpose: revocation only has to
// outlive them, and a stolen one dies on its own within ClientTTL.
const (
	CAValidity       = 10 * 365 * 24 * time.Hour
	DefaultClientTTL = 12 * time.Hour
	DefaultServerTTL = 7 * 24 * time.Hour
	// backdate absorbs small clock skew between host and guest.
	backdate = 5 * time.Minute
)

// Roles carried in a client certificate's OU.
const (
	RoleManager = "manager"
	RoleWorker  = "worker"
)

// CA is a loaded certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
	dir     string
	// Now is the clock; tests move it to mint expired or not-yet-valid certificates.
	Now func() time.Time

	mu  sync.Mutex // serialises the issued/revoked registry
	rev *revCache
}

// Dir is where the CA keeps its files.
func (c *CA) Dir() string { return c.dir }

// Fingerprint is the SHA-256 of the CA certificate's DER, hex: what a client pins.
func (c *CA) Fingerprint() string {
	s := sha256.Sum256(c.Cert.Raw)
	return hex.EncodeToString(s[:])
}

// Pool is a cert pool holding only this CA.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.Cert)
	return p
}

// LoadOrCreate loads the CA in dir, creating it (dir 0700, key 0600) when neither file
// exists. A key file readable by anyone but its owner is refused, naming the file: the CA
// key is the root of every broker credential.
func LoadOrCreate(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
		return create(dir)
	case certErr != nil:
		return nil, fmt.Errorf("ca: %s: %w (the key exists without its certificate)", certPath, certErr)
	case keyErr != nil:
		return nil, fmt.Errorf("ca: %s: %w (the certificate exists without its key)", keyPath, keyErr)
	}
	return Load(dir)
}

// Load loads an existing CA from dir.
func Load(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	keyPEM, err := ReadPrivateFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("ca: reading %s: %w", certPath, err)
	}
	cert, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("ca: %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("ca: %s is not a CA certificate", certPath)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ca: %s: %w", keyPath, err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, fmt.Errorf("ca: %s does not match the certificate in %s", keyPath, certPath)
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key, dir: dir, Now: time.Now}, nil
}

func create(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ca: creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: generating key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          mustSerial(),
		Subject:               pkix.Name{CommonName: "lever CA", Organization: []string{"lever"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("ca: self-signing: %w", err)
	}
	keyPEM, err := MarshalKeyPEM(key)
	if err != nil {
		return nil, err
	}
	// Key first, exclusively: two lever processes racing to create the CA must not end up
	// with a certificate that belongs to the other one's key.
	if err := WritePrivateFileExcl(filepath.Join(dir, KeyFile), keyPEM); err != nil {
		if errors.Is(err, os.ErrExist) {
			return Load(dir)
		}
		return nil, fmt.Errorf("ca: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := WriteFileAtomic(filepath.Join(dir, CertFile), certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	return Load(dir)
}

// mustSerial returns a random 128-bit positive serial.
func mustSerial() *big.Int {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	n, err := rand.Int(rand.Reader, limit)
	if err != nil {
		panic(fmt.Sprintf("ca: reading random serial: %v", err))
	}
	return n.Add(n, big.NewInt(1))
}

// SerialHex is the canonical text form of a serial used in the registry, audit and admin.
func SerialHex(n *big.Int) string { return fmt.Sprintf("%x", n) }
