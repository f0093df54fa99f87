package events

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestLogAppendsResumesAndTails: ids continue across a reopen (a resumed run), a tail
// returns only whole lines (a half-written line waits for its end), and Wake is closed by
// the next Emit without anybody reading it.
func TestLogAppendsResumesAndTails(t *testing.T) {
	p := filepath.Join(t.TempDir(), FileName)
	l, err := Open(p, "r-1")
	if err != nil {
		t.Fatal(err)
	}
	wake := l.Wake()
	for i := 0; i < 3; i++ {
		if _, err := l.Emit(Event{Type: Turn, Turn: i + 1}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-wake:
	default:
		t.Fatal("Emit did not wake the readers")
	}
	l.Close()
	l, err = Open(p, "r-1")
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := l.Emit(Event{Type: RunEnd}); id != 4 {
		t.Fatalf("id after reopen %d, want 4", id)
	}
	l.Close()
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}

	tl, err := NewTail(p)
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	evs, err := tl.Next(100)
	if err != nil || len(evs) != 4 || evs[3].Type != RunEnd || evs[0].Run != "r-1" {
		t.Fatalf("tail: %+v %v", evs, err)
	}
	// A writer halfway through a line: nothing yet; the rest: one event.
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"id":5,"run":"r-1",`)
	if evs, err := tl.Next(100); err != nil || len(evs) != 0 {
		t.Fatalf("half a line read as %+v %v", evs, err)
	}
	f.WriteString(`"type":"turn"}` + "\n")
	f.Close()
	if evs, err := tl.Next(100); err != nil || len(evs) != 1 || evs[0].ID != 5 {
		t.Fatalf("completed line: %+v %v", evs, err)
	}
	if n, err := LastID(p); n != 5 || err != nil {
		t.Fatalf("LastID %d %v", n, err)
	}
}

// TestEmitErrorSticks: a write that fails is an error naming the file, and every later
// Emit returns it (the run stops on it); a good log (control) writes.
func TestEmitErrorSticks(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full")
	}
	l := &Log{path: "/runs/r-1/events.jsonl", run: "r-1", f: full, wake: make(chan struct{})}
	_, err = l.Emit(Event{Type: RunStart})
	if err == nil || !strings.Contains(err.Error(), "/runs/r-1/events.jsonl") {
		t.Fatalf("Emit to a full device: %v", err)
	}
	if _, err2 := l.Emit(Event{Type: Turn}); err2 == nil || err2.Error() != err.Error() || l.Err() == nil || l.Last() != 0 {
		t.Fatalf("second Emit: %v (last %d)", err2, l.Last())
	}
	l.Close()
	ok, _ := Open(filepath.Join(t.TempDir(), FileName), "r-1")
	if _, err := ok.Emit(Event{Type: RunStart}); err != nil {
		t.Fatalf("control: %v", err)
	}
	ok.Close()
}

func TestCapArgs(t *testing.T) {
	small := json.RawMessage(`{"a":1}`)
	if string(CapArgs(small)) != string(small) {
		t.Fatal("small args changed")
	}
	big, _ := json.Marshal(map[string]string{"c": strings.Repeat("x", 5000)})
	c := CapArgs(big)
	var s string
	if len(c) > MaxArgs+64 || json.Unmarshal(c, &s) != nil || !strings.HasSuffix(s, "(truncated)") {
		t.Fatalf("capped args %d bytes: %.80s", len(c), c)
	}
	// An ask carries the same 5000 bytes whole; past MaxAskArgs it is marked too.
	if string(CapAskArgs(big)) != string(big) {
		t.Fatalf("ask args of %d bytes changed", len(big))
	}
	huge, _ := json.Marshal(map[string]string{"c": strings.Repeat("é", MaxAskArgs)})
	c = CapAskArgs(huge)
	if len(c) > MaxAskArgs+64 || json.Unmarshal(c, &s) != nil || !strings.HasSuffix(s, "(truncated)") || !utf8.ValidString(s) {
		t.Fatalf("capped ask args %d bytes: %.80s", len(c), c)
	}
}
