package ticket

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

func TestRedeem(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Now = clock
	mk := func(agent string, ttl time.Duration) string {
		tok, err := s.Issue(agent, ca.RoleWorker, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	used := mk("w1", time.Hour)
	if _, err := s.Redeem(used, "w1"); err != nil {
		t.Fatal(err)
	}
	expired := mk("w1", time.Minute)
	other := mk("w2", time.Hour)
	for _, tc := range []struct {
		name, tok, agent string
		advance          time.Duration
		restart          bool
		want             error
	}{
		{"replay", used, "w1", 0, false, ErrUsed},
		{"replay after restart", used, "w1", 0, true, ErrUsed},
		{"other worker's ticket", other, "w1", 0, false, ErrWrongAgent},
		{"expired", expired, "w1", 2 * time.Minute, false, ErrExpired},
		{"unknown", Prefix + strings.Repeat("A", 43), "w1", 0, false, ErrUnknown},
		{"malformed", "hello", "w1", 0, false, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now = now.Add(tc.advance)
			st := s
			if tc.restart {
				st, _ = Open(dir)
				st.Now = clock
			}
			_, err := st.Redeem(tc.tok, tc.agent)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), tc.tok) {
				t.Errorf("error repeats the ticket: %v", err)
			}
		})
	}
	// The wrong-agent attempt did not burn w2's ticket.
	if tk, err := s.Redeem(other, "w2"); err != nil || tk.Agent != "w2" {
		t.Fatalf("w2 redeeming its own ticket: %v", err)
	}
	// The store never holds a ticket's text.
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if info.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(p)
		for _, tok := range []string{used, expired, other} {
			if strings.Contains(string(data), tok) || strings.Contains(p, tok) {
				t.Errorf("%s holds a ticket's text", p)
			}
		}
		return nil
	})
}

func TestRedeemConcurrentlyOnce(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	tok, err := s.Issue("w1", ca.RoleWorker, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, _ := Open(dir) // separate store values, as separate processes would be
			if _, err := st.Redeem(tok, "w1"); err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, ErrUsed) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d redemptions succeeded, want exactly 1", wins)
	}
}

func TestIssueRefusesBadInput(t *testing.T) {
	s, _ := Open(t.TempDir())
	for _, tc := range []struct{ agent, role string }{{"Bad Name", ca.RoleWorker}, {"", ca.RoleWorker}, {"w1", "admin"}} {
		if _, err := s.Issue(tc.agent, tc.role, time.Hour); err == nil {
			t.Errorf("issued a ticket for %q/%q", tc.agent, tc.role)
		}
	}
}

func TestPrune(t *testing.T) {
	now := time.Now()
	s, _ := Open(t.TempDir())
	s.Now = func() time.Time { return now }
	old, _ := s.Issue("w1", ca.RoleWorker, time.Minute)
	s.Redeem(old, "w1")
	fresh, _ := s.Issue("w2", ca.RoleWorker, time.Hour)
	now = now.Add(10 * time.Minute)
	n, err := s.Prune(time.Minute)
	if err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want 1", n, err)
	}
	if _, err := s.Redeem(old, "w1"); !errors.Is(err, ErrUnknown) {
		t.Errorf("pruned ticket: %v, want unknown", err)
	}
	if _, err := s.Redeem(fresh, "w2"); err != nil {
		t.Errorf("fresh ticket pruned: %v", err)
	}
}

// TestPending: Pending never spends a ticket and is true only for a known, unused,
// unexpired one.
func TestPending(t *testing.T) {
	now := time.Now()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.Now = func() time.Time { return now }
	live, _ := s.Issue("w1", ca.RoleWorker, time.Hour)
	used, _ := s.Issue("w1", ca.RoleWorker, time.Hour)
	if _, err := s.Redeem(used, "w1"); err != nil {
		t.Fatal(err)
	}
	short, _ := s.Issue("w1", ca.RoleWorker, time.Minute)
	for _, tc := range []struct {
		name, tok string
		want      bool
	}{
		{"pending", live, true},
		{"pending again (not spent by asking)", live, true},
		{"used", used, false},
		{"unknown", Prefix + strings.Repeat("A", 43), false},
		{"malformed", "lvt_x", false},
		{"path-like", Prefix + strings.Repeat("../", 14) + "a", false},
	} {
		if got := s.Pending(tc.tok); got != tc.want {
			t.Errorf("%s: Pending = %v, want %v", tc.name, got, tc.want)
		}
	}
	now = now.Add(2 * time.Minute)
	if s.Pending(short) {
		t.Error("expired ticket is pending")
	}
	if _, err := s.Redeem(live, "w1"); err != nil {
		t.Errorf("Pending spent the ticket: %v", err)
	}
}

// TestBurn: a burned ticket is no longer pending and its redemption names why; burning
// an unknown or malformed ticket is an error and creates nothing. Control: an unburned
// ticket is pending and redeems.
func TestBurn(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := s.Issue("w1", "worker", time.Hour)
	other, _ := s.Issue("w1", "worker", time.Hour)
	if err := s.Burn(tok, "5 failed enrolments"); err != nil {
		t.Fatal(err)
	}
	if s.Pending(tok) {
		t.Error("burned ticket still pending")
	}
	if _, err := s.Redeem(tok, "w1"); !errors.Is(err, ErrBurned) {
		t.Errorf("redeeming a burned ticket: %v, want ErrBurned", err)
	}
	if err := s.Burn(tok, "again"); !errors.Is(err, ErrBurned) {
		t.Errorf("burning twice: %v", err)
	}
	if err := s.Burn(Prefix+strings.Repeat("A", 43), "x"); !errors.Is(err, ErrUnknown) {
		t.Errorf("burning an unknown ticket: %v", err)
	}
	if err := s.Burn("nope", "x"); !errors.Is(err, ErrMalformed) {
		t.Errorf("burning a malformed ticket: %v", err)
	}
	if !s.Pending(other) {
		t.Fatal("control: the other ticket is not pending")
	}
	if _, err := s.Redeem(other, "w1"); err != nil {
		t.Errorf("control: %v", err)
	}
	if _, err := s.Redeem(other, "w1"); !errors.Is(err, ErrUsed) {
		t.Errorf("redeemed twice: %v, want ErrUsed (not ErrBurned)", err)
	}
}
