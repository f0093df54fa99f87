// Package ticket issues and redeems single-use enrolment tickets. A ticket is bound to one
// agent name and role, expires after a TTL, and can be redeemed once, ever: redemption is
// recorded on disk with an exclusive create before any certificate is issued, so neither a
// replay nor a broker restart re-enables it. Only a hash of each ticket is stored, so the
// store itself holds nothing a reader could redeem.
//
// It owns the ticket store's directory and must not issue a certificate itself: the
// broker does, after Redeem succeeds.
package ticket

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// Prefix marks a lever ticket, so one pasted in the wrong place is recognisable.
const Prefix = "lvt_"

// DefaultTTL is how long an unredeemed ticket lives: long enough for a bring-up.
const DefaultTTL = 15 * time.Minute

// Redemption failures. Each is refused with 403; the message never repeats the ticket.
var (
	ErrUnknown    = errors.New("ticket is not known")
	ErrUsed       = errors.New("ticket has already been redeemed")
	ErrWrongAgent = errors.New("ticket is bound to another agent")
	ErrExpired    = errors.New("ticket has expired")
	ErrMalformed  = errors.New("ticket is malformed")
	// ErrBurned is a ticket spent without issuing (Burn): too many failed enrolments.
	ErrBurned = errors.New("ticket was spent by repeated failed enrolments; issue a new one")
)

// Ticket is what the store keeps for one ticket (no secret in it).
type Ticket struct {
	Agent   string    `json:"agent"`
	Role    string    `json:"role"`
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
}

// Store keeps tickets in a directory (mode 0700).
type Store struct {
	dir string
	Now func() time.Time
}

// Open opens (creating) the ticket store in dir.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ticket store: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ticket store: %w", err)
	}
	return &Store{dir: dir, Now: time.Now}, nil
}

// Issue makes a ticket for agent in role, valid for ttl, and returns its secret text. The
// caller delivers it to that agent only (a worker's /run/lever, from a tmpfs).
func (s *Store) Issue(agent, role string, ttl time.Duration) (string, error) {
	if err := ca.ValidAgentName(agent); err != nil {
		return "", fmt.Errorf("ticket: %w", err)
	}
	if role != ca.RoleManager && role != ca.RoleWorker {
		return "", fmt.Errorf("ticket: role %q is not %s or %s", role, ca.RoleManager, ca.RoleWorker)
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("ticket: %w", err)
	}
	tok := Prefix + base64.RawURLEncoding.EncodeToString(raw[:])
	now := s.Now()
	data, err := json.Marshal(Ticket{Agent: agent, Role: role, Issued: now, Expires: now.Add(ttl)})
	if err != nil {
		return "", err
	}
	if err := ca.WritePrivateFileExcl(s.path(tok, ".json"), data); err != nil {
		return "", fmt.Errorf("ticket: %w", err)
	}
	return tok, nil
}

func hashOf(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

func (s *Store) path(tok, ext string) string { return filepath.Join(s.dir, hashOf(tok)+ext) }

// Redeem checks tok against agent and marks it used. It succeeds at most once per ticket
// across all processes sharing the store: the mark is an O_EXCL create, made durable
// before Redeem returns, and only the caller whose create succeeded gets the Ticket.
func (s *Store) Redeem(tok, agent string) (*Ticket, error) {
	if !strings.HasPrefix(tok, Prefix) || len(tok) != len(Prefix)+43 {
		return nil, ErrMalformed
	}
	data, err := os.ReadFile(s.path(tok, ".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrUnknown
	}
	if err != nil {
		return nil, fmt.Errorf("ticket: %w", err)
	}
	var t Ticket
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("ticket: stored record: %w", err)
	}
	if _, err := os.Stat(s.path(tok, ".used")); err == nil {
		return nil, s.usedErr(tok)
	}
	if subtle.ConstantTimeCompare([]byte(t.Agent), []byte(agent)) != 1 {
		return nil, ErrWrongAgent
	}
	if !s.Now().Before(t.Expires) {
		return nil, ErrExpired
	}
	mark := fmt.Sprintf(`{"agent":%q,"redeemed":%q}`, agent, s.Now().UTC().Format(time.RFC3339Nano))
	if err := ca.WritePrivateFileExcl(s.path(tok, ".used"), []byte(mark)); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, s.usedErr(tok)
		}
		return nil, fmt.Errorf("ticket: recording redemption: %w", err)
	}
	if d, err := os.Open(s.dir); err == nil {
		d.Sync()
		d.Close()
	}
	return &t, nil
}

// usedErr is ErrBurned for a ticket Burn spent, else ErrUsed.
func (s *Store) usedErr(tok string) error {
	if data, err := os.ReadFile(s.path(tok, ".used")); err == nil {
		var m struct {
			Burned string `json:"burned"`
		}
		if json.Unmarshal(data, &m) == nil && m.Burned != "" {
			return ErrBurned
		}
	}
	return ErrUsed
}

// Burn spends tok without anything being issued for it, recording why: the broker burns
// a pending ticket after repeated failed enrolments with it, so a pending ticket (which
// lets an enrolment past the per-address rate limit) cannot carry endless broken
// attempts. A ticket already spent stays as it is (ErrUsed or ErrBurned).
func (s *Store) Burn(tok, reason string) error {
	if !strings.HasPrefix(tok, Prefix) || len(tok) != len(Prefix)+43 {
		return ErrMalformed
	}
	if _, err := os.Stat(s.path(tok, ".json")); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return ErrUnknown
		}
		return fmt.Errorf("ticket: %w", err)
	}
	mark, err := json.Marshal(map[string]string{"burned": reason, "at": s.Now().UTC().Format(time.RFC3339Nano)})
	if err != nil {
		return err
	}
	if err := ca.WritePrivateFileExcl(s.path(tok, ".used"), mark); err != nil {
		if errors.Is(err, os.ErrExist) {
			return s.usedErr(tok)
		}
		return fmt.Errorf("ticket: recording burn: %w", err)
	}
	return nil
}

// Pending reports whether tok is a well-formed ticket that is known, not redeemed and not
// expired, without spending it. The broker uses it to let an enrolment through when the
// rate limit of unauthenticated requests is exhausted: a jail process without a ticket
// must not be able to starve the one that has one.
func (s *Store) Pending(tok string) bool {
	if !strings.HasPrefix(tok, Prefix) || len(tok) != len(Prefix)+43 {
		return false
	}
	data, err := os.ReadFile(s.path(tok, ".json"))
	if err != nil {
		return false
	}
	var t Ticket
	if json.Unmarshal(data, &t) != nil || !s.Now().Before(t.Expires) {
		return false
	}
	_, err = os.Stat(s.path(tok, ".used"))
	return errors.Is(err, os.ErrNotExist)
}

// Prune removes tickets (and their used marks) that expired more than grace ago. A used
// mark is kept as long as its ticket record, so a pruned ticket is unknown, never fresh.
func (s *Store) Prune(grace time.Duration) (int, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("ticket: %w", err)
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		p := filepath.Join(s.dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var t Ticket
		if json.Unmarshal(data, &t) != nil || s.Now().Before(t.Expires.Add(grace)) {
			continue
		}
		// Record first, then the mark: if we stop in between, the ticket is unknown.
		if os.Remove(p) == nil {
			os.Remove(strings.TrimSuffix(p, ".json") + ".used")
			n++
		}
	}
	return n, nil
}
