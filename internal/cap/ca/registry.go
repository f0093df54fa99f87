package ca

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// RegistryFile records issued client certificates and revocations, so revocation works by
// agent name and survives restarts. It holds serials and names only, never a key.
const RegistryFile = "clients.json"

type issued struct {
	Serial   string    `json:"serial"`
	Agent    string    `json:"agent"`
	Role     string    `json:"role"`
	NotAfter time.Time `json:"not_after"`
}

type revoked struct {
	Agent    string    `json:"agent"`
	At       time.Time `json:"at"`
	NotAfter time.Time `json:"not_after"`
}

type registry struct {
	Issued  []issued           `json:"issued"`
	Revoked map[string]revoked `json:"revoked"`
}

// revCache is the in-memory view of the revoked set, refreshed when the file changes
// (another lever process may revoke through the file).
type revCache struct {
	mod  time.Time
	size int64
	set  map[string]bool
}

func (c *CA) registryPath() string { return filepath.Join(c.dir, RegistryFile) }

func (c *CA) loadRegistry() (*registry, error) {
	r := &registry{Revoked: map[string]revoked{}}
	data, err := os.ReadFile(c.registryPath())
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ca: reading %s: %w", c.registryPath(), err)
	}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("ca: %s: %w", c.registryPath(), err)
	}
	if r.Revoked == nil {
		r.Revoked = map[string]revoked{}
	}
	return r, nil
}

func (c *CA) saveRegistry(r *registry) error {
	now := c.Now()
	// Expired entries can go: an expired certificate is refused by TLS already.
	kept := r.Issued[:0]
	for _, e := range r.Issued {
		if now.Before(e.NotAfter) {
			kept = append(kept, e)
		}
	}
	r.Issued = kept
	for s, e := range r.Revoked {
		if !now.Before(e.NotAfter) {
			delete(r.Revoked, s)
		}
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(c.registryPath(), data, 0o600); err != nil {
		return fmt.Errorf("ca: %w", err)
	}
	c.rev = nil
	return nil
}

func (c *CA) record(leaf *x509.Certificate, agent, role string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.loadRegistry()
	if err != nil {
		return err
	}
	r.Issued = append(r.Issued, issued{Serial: SerialHex(leaf.SerialNumber), Agent: agent, Role: role, NotAfter: leaf.NotAfter})
	return c.saveRegistry(r)
}

// RevokeSerial revokes one client certificate by its serial (hex). It returns the agent
// it belonged to; an unknown serial is an error, so a typo is not a silent no-op.
func (c *CA) RevokeSerial(serial string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.loadRegistry()
	if err != nil {
		return "", err
	}
	for _, e := range r.Issued {
		if e.Serial == serial {
			r.Revoked[serial] = revoked{Agent: e.Agent, At: c.Now(), NotAfter: e.NotAfter}
			return e.Agent, c.saveRegistry(r)
		}
	}
	return "", fmt.Errorf("ca: no live client certificate with serial %s", serial)
}

// RevokeAgent revokes every live client certificate issued to agent and returns their
// serials. The agent can come back only through a new enrolment ticket.
func (c *CA) RevokeAgent(agent string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.loadRegistry()
	if err != nil {
		return nil, err
	}
	var serials []string
	for _, e := range r.Issued {
		if e.Agent == agent && c.Now().Before(e.NotAfter) {
			r.Revoked[e.Serial] = revoked{Agent: e.Agent, At: c.Now(), NotAfter: e.NotAfter}
			serials = append(serials, e.Serial)
		}
	}
	if len(serials) == 0 {
		return nil, fmt.Errorf("ca: agent %q has no live client certificate", agent)
	}
	sort.Strings(serials)
	return serials, c.saveRegistry(r)
}

// IsRevoked reports whether a client certificate has been revoked. It re-reads the
// registry only when the file changed, so the per-request cost is one stat.
func (c *CA) IsRevoked(cert *x509.Certificate) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := os.Stat(c.registryPath())
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ca: %w", err)
	}
	if c.rev == nil || !st.ModTime().Equal(c.rev.mod) || st.Size() != c.rev.size {
		r, err := c.loadRegistry()
		if err != nil {
			return false, err
		}
		set := make(map[string]bool, len(r.Revoked))
		for s := range r.Revoked {
			set[s] = true
		}
		c.rev = &revCache{mod: st.ModTime(), size: st.Size(), set: set}
	}
	return c.rev.set[SerialHex(cert.SerialNumber)], nil
}
