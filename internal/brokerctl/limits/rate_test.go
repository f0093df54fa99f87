package limits

import (
	"testing"
	"time"
)

// TestRateTable: the token bucket per key, on a clock the test moves. Each row is a run
// of steps against a fresh Rate of 2 per second with a burst of 3; a step advances the
// clock, then asks Allow or LogRefusal for a key.
func TestRateTable(t *testing.T) {
	type step struct {
		after time.Duration
		key   string
		log   bool // LogRefusal instead of Allow
		want  bool
		left  int // LogRefusal: refusals not logged since the last line
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"burst, then refused", []step{{0, "a", false, true, 0}, {0, "a", false, true, 0}, {0, "a", false, true, 0}, {0, "a", false, false, 0}}},
		{"refills at the rate", []step{{0, "a", false, true, 0}, {0, "a", false, true, 0}, {0, "a", false, true, 0}, {0, "a", false, false, 0}, {500 * time.Millisecond, "a", false, true, 0}, {0, "a", false, false, 0}}},
		{"refill capped at the burst", []step{{time.Hour, "a", false, true, 0}, {0, "a", false, true, 0}, {0, "a", false, true, 0}, {0, "a", false, false, 0}}},
		{"keys are separate", []step{{0, "a", false, true, 0}, {0, "a", false, true, 0}, {0, "a", false, true, 0}, {0, "a", false, false, 0}, {0, "b", false, true, 0}}},
		{"one logged refusal per logEvery, the rest counted", []step{
			{0, "a", true, true, 0}, {time.Second, "a", true, false, 0}, {time.Second, "a", true, false, 0},
			{10 * time.Second, "a", true, true, 2}, {0, "b", true, true, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			r := NewRate(2, 3, 10*time.Second)
			r.now = func() time.Time { return now }
			for i, s := range tc.steps {
				now = now.Add(s.after)
				if s.log {
					got, left := r.LogRefusal(s.key)
					if got != s.want || left != s.left {
						t.Fatalf("step %d: LogRefusal(%s) = %v, %d; want %v, %d", i, s.key, got, left, s.want, s.left)
					}
					continue
				}
				if got := r.Allow(s.key); got != s.want {
					t.Fatalf("step %d: Allow(%s) = %v, want %v", i, s.key, got, s.want)
				}
			}
		})
	}
}

// TestRateBoundsItsKeys: past MaxTracked keys the idle ones are dropped, so a flood from
// many addresses costs bounded memory; a busy key seen again starts from a full bucket.
func TestRateBoundsItsKeys(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := NewRate(1, 1, 0)
	r.now = func() time.Time { return now }
	for i := 0; i < MaxTracked; i++ {
		r.Allow(string(rune(0x4e00 + i)))
	}
	if len(r.ips) != MaxTracked {
		t.Fatalf("%d keys tracked, want %d", len(r.ips), MaxTracked)
	}
	now = now.Add(2 * time.Minute) // all idle
	r.Allow("new")
	if len(r.ips) != 1 {
		t.Fatalf("%d keys after the idle ones went, want 1", len(r.ips))
	}
}
