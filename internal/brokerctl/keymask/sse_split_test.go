package keymask

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/keymask/keymasktest"
)

// TestSSEMaskerRandomSplits: the key, in every form the masker knows, split at random
// points over the "text" deltas of random streams (with pings and other fields between
// them, and benign text around it), never comes back whole when a client joins the
// deltas; benign streams come back unchanged. The search looks back only as far as the
// live partial occurrence (sseChannel.tail), so this checks that no split point falls
// outside it. Control: the same streams through a masker without the key rebuild it.
func TestSSEMaskerRandomSplits(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	run := func(m *Masker, text string) string {
		sm := NewSSE(m)
		var out [][]byte
		pos := 0
		for pos < len(text) {
			n := 1 + rng.Intn(7)
			piece := text[pos:min(pos+n, len(text))]
			pos += len(piece)
			q, _ := json.Marshal(piece)
			out = append(out, sm.Push([]byte(fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":%s}}\n\n", q)))...)
			if rng.Intn(3) == 0 {
				out = append(out, sm.Push([]byte("event: ping\ndata: {\"type\": \"ping\", \"n\": \"s\"}\n\n"))...)
			}
		}
		out = append(out, sm.Finish()...)
		var joined strings.Builder
		for _, f := range out {
			for _, line := range strings.Split(string(f), "\n") {
				var ev struct{ Delta struct{ Text string } }
				if d, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(d), &ev) == nil {
					joined.WriteString(ev.Delta.Text)
				}
			}
		}
		return joined.String()
	}
	m := New([]byte(testKey))
	off := New(nil)
	start := time.Now()
	// The forms in a fixed order: ranging over the map would hand each form a different
	// stretch of the seeded rng on every run, so a failing split could not be reproduced.
	forms := keymasktest.Forms(testKey)
	for _, name := range slices.Sorted(maps.Keys(forms)) {
		enc := forms[name]
		for i := 0; i < 60; i++ {
			pre := strings.Repeat("s", rng.Intn(4)) + fmt.Sprintf(" item %d: ", i)
			text := pre + enc + " end"
			got := run(m, text)
			if strings.Contains(got, enc[MinHold-1:]) || !strings.HasPrefix(got, pre[:len(pre)-2]) || !strings.HasSuffix(got, " end") {
				t.Fatalf("%s split %d: joined %q", name, i, got)
			}
			if got := run(off, text); got != text {
				t.Fatalf("control %s: without the key the join is %q", name, got)
			}
		}
	}
	benign := "sk- s sk-lever-tes %7 \\u00 &#11 sk-lever-test-4f9c2a7e81d04b6f9a3 done"
	for i := 0; i < 60; i++ {
		if got := run(m, benign); got != benign {
			t.Fatalf("benign stream changed: %q", got)
		}
	}
	t.Logf("%v for %d streams", time.Since(start), 60*(len(forms)*2+1))
}
