package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/lever-jail/lever/internal/hostterm"
)

// termSafe writes what the jail prints to a terminal of the host's, outside a terminal
// session, with every control character made visible: the bytes come from the agent's
// side (model output, tool arguments, file contents, a blueprint's names), and an escape
// sequence reaching the host's terminal could retitle it, rewrite what the user reads
// (\r, cursor moves), write the clipboard (OSC 52) or worse. Newline and tab pass. A
// terminal session (lever shell, an interactive lever run) is the user asking for the raw
// stream, as with docker exec -it, and is not filtered.
type termSafe struct {
	w       io.Writer
	pending bool // the last Write ended in 0xC2, the first byte of a UTF-8 C1 control
}

func (t *termSafe) Write(p []byte) (int, error) {
	var b strings.Builder
	i := 0
	if t.pending {
		t.pending = false
		if len(p) > 0 && p[0] >= 0x80 && p[0] <= 0x9f {
			fmt.Fprintf(&b, `\u%04x`, p[0])
			i = 1
		} else {
			b.WriteByte(0xc2)
		}
	}
	for ; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\n' || c == '\t':
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		case c == 0xc2 && i+1 == len(p):
			t.pending = true
		case c == 0xc2 && p[i+1] >= 0x80 && p[i+1] <= 0x9f:
			// U+0080..U+009F: the C1 controls (CSI is U+009B) some terminals obey.
			fmt.Fprintf(&b, `\u%04x`, p[i+1])
			i++
		default:
			b.WriteByte(c)
		}
	}
	if _, err := io.WriteString(t.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a trailing 0xC2 held back at the end of the stream.
func (t *termSafe) Flush() error {
	if !t.pending {
		return nil
	}
	t.pending = false
	_, err := t.w.Write([]byte{0xc2})
	return err
}

// safeFor wraps w in termSafe when it is a terminal.
func safeFor(w io.Writer) (io.Writer, func() error) {
	if !hostterm.IsTerminal(w) {
		return w, func() error { return nil }
	}
	t := &termSafe{w: w}
	return t, t.Flush
}
