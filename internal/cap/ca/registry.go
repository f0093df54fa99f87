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
	// IssuedAt is the CA clock at signing, exact (NotBefore is backdated and truncated to
	// the second), so a renewal can tell a pre-revocation certificate from a re-enrolled one.
	IssuedAt time.Time `json:"issued_at,omitempty"`
}

type revoked struct {
	Agent    string    `json:"agent"`
	At       time.Time `json:"at"`
	NotAfter time.Time `json:"not_after"`
}

type registry struct {
	Issued  []issued           `json:"issued"`
	Revoked map[string]revoked `json:"revoked"`
	// Agents holds the time each agent was revoked by name. It is durable and is never
	// cleared: it refuses every issuance authorised by something older than the revocation
	// (a certificate presented at /renew, a ticket made before it), so a renewal or
	// enrolment already in flight when the revocation lands cannot mint a fresh, unrevoked
	// certificate. A ticket made after it re-enrols the agent deliberately.
	Agents map[string]time.Time `json:"revoked_agents,omitempty"`
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
	r := &registry{Revoked: map[string]revoked{}, Agents: map[string]time.Time{}}
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
	if r.Agents == nil {
		r.Agents = map[string]time.Time{}
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
// serials, and marks the agent revoked by name from now on (see registry.Agents): a
// renewal or enrolment racing with this call either finished first, and its certificate
// is among those revoked here, or runs after and is refused. The agent can come back only
// through an enrolment ticket made after this call.
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
	r.Agents[agent] = c.Now()
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
