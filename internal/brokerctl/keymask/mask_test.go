package keymask

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/brokerctl/keymask/keymasktest"
)

// The masker on its own: every form is masked wherever it sits, however the stream is
// cut, and text that merely resembles the key passes unchanged (the negative rows prove
// the masker is not masking everything).
// testKey is the key the tables mask (the broker's tests use the same one).
const testKey = "sk-lever-test-4f9c2a7e81d04b6f9a3c"

func TestMaskerTable(t *testing.T) {
	m := New([]byte(testKey))
	for name, enc := range keymasktest.Forms(testKey) {
		t.Run(name, func(t *testing.T) {
			in := "a " + enc + " b"
			// Through the stream, cut at every position.
			for cut := 0; cut <= len(in); cut += 1 + len(in)/40 {
				var out bytes.Buffer
				ms := NewStream(&out, m)
				ms.Write([]byte(in[:cut]))
				ms.Write([]byte(in[cut:]))
				ms.Close()
				got := out.String()
				if len(got) != len(in) || strings.Contains(got, enc) || !strings.HasPrefix(got, "a ") || !strings.HasSuffix(got, " b") {
					t.Fatalf("cut %d: %q", cut, got)
				}
			}
		})
	}
	for _, benign := range []string{
		"sk-lever-test-4f9c2a7e81d04b6f9a3", // one character short
		"sk-lever-test-4f9c2a7e81d04b6f9a3d",
		"hello %73 world \\u0073 &#115; plain text",
		strings.Repeat("a", 1000),
	} {
		if got := m.String(benign); got != benign {
			t.Errorf("benign %q became %q", benign, got)
		}
	}
	// A line break ends every possible match: nothing before it is held back.
	var out bytes.Buffer
	ms := NewStream(&out, m)
	ms.Write([]byte("data: x sk-lever\n\n"))
	if out.String() != "data: x sk-lever\n\n" {
		t.Errorf("held back across a line break: %q", out.String())
	}
}
