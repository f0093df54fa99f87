package hostterm

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// The neutraliser: text that came from an agent's side (model output, tool arguments and
// results, a tree blueprint's names, a guest's stderr) must reach a terminal as text only.
// An escape sequence that reached it could retitle the terminal, redraw what the person
// reads (\r, cursor moves, erase-line: the approval prompt made to show another command),
// or write the clipboard (OSC 52). Every control character a terminal may obey is written
// out visibly instead: C0 and DEL as \x1b, \x7f; the C1 controls U+0080-U+009F as \u009b
// (8-bit CSI, OSC and ST are obeyed by some terminals); a byte that is not UTF-8 as \xNN
// (a lone 0x9b is CSI to a terminal set to Latin-1); the characters that reorder or hide
// text (hidesText) as \u202e. Other printable text, UTF-8 included, is never changed. lever's host commands and lev's renderer both use it, so there is one
// rule for what may reach a person's terminal.

// keep is the set of C0 controls a caller lets through unchanged: the layout it emits on
// purpose.
type keep uint8

const (
	keepNL   keep = 1 << iota // newline
	keepTab                   // tab
	keepCRLF                  // a CR directly before a newline: a terminal session's line end (the pty's ONLCR)
)

// escape appends src to dst neutralised. Unless final, it stops before a tail the next
// bytes decide (an incomplete UTF-8 sequence, a CR a newline may follow) and returns how
// much of src it consumed; a stream's writes may split anywhere.
func escape(dst, src []byte, k keep, final bool) ([]byte, int) {
	for i := 0; i < len(src); {
		c := src[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\n' && k&keepNL != 0, c == '\t' && k&keepTab != 0:
				dst = append(dst, c)
			case c == '\r' && k&keepCRLF != 0 && i+1 < len(src) && src[i+1] == '\n':
				dst = append(dst, c)
			case c == '\r' && k&keepCRLF != 0 && i+1 == len(src) && !final:
				return dst, i
			case c < 0x20 || c == 0x7f:
				dst = fmt.Appendf(dst, `\x%02x`, c)
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(src[i:])
		switch {
		case r == utf8.RuneError && n == 1 && !final && !utf8.FullRune(src[i:]):
			return dst, i
		case r == utf8.RuneError && n == 1:
			dst = fmt.Appendf(dst, `\x%02x`, c)
		case r >= 0x80 && r <= 0x9f, hidesText(r):
			dst = fmt.Appendf(dst, `\u%04x`, r)
		default:
			dst = append(dst, src[i:i+n]...)
		}
		i += n
	}
	return dst, len(src)
}

// hidesText says whether r is a character a terminal draws as nothing or uses to reorder
// what it draws: the bidirectional embeddings, overrides and isolates (U+202A-U+202E,
// U+2066-U+2069, the marks U+200E, U+200F and U+061C), the zero-width characters
// (U+200B-U+200D, U+2060-U+2064, U+FEFF). None is a control a terminal obeys, but each
// lets a command read differently from what runs ("rm -rf ~" shown reversed, a word split
// invisibly), so, like the taint gate's target check, the neutraliser shows them.
func hidesText(r rune) bool {
	switch {
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r >= 0x200b && r <= 0x200f,
		r >= 0x2060 && r <= 0x2064, r == 0xfeff, r == 0x061c:
		return true
	}
	return false
}

// Escape is s neutralised for a terminal; newline and tab pass, for text laid out in
// lines (a run's result, an error).
func Escape(s string) string {
	b, _ := escape(nil, []byte(s), keepNL|keepTab, true)
	return string(b)
}

// EscapeLine is s neutralised for a terminal with newline and tab made visible too, for
// what must stay on its one line (a progress line, the question of an approval prompt).
func EscapeLine(s string) string {
	b, _ := escape(nil, []byte(s), 0, true)
	return string(b)
}

// Writer neutralises a stream on its way to w. Flush writes what the last Write held
// back (an incomplete UTF-8 sequence, a CR), neutralised, at the stream's end.
type Writer struct {
	w    io.Writer
	k    keep
	held []byte
}

// NewWriter neutralises a stream as Escape does.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, k: keepNL | keepTab} }

// NewSessionWriter neutralises the output of a terminal session (a pty in the jail whose
// line ends arrive as \r\n): CR passes only directly before a newline, so a line ends as
// the terminal expects while a bare \r, which redraws the line, is shown.
func NewSessionWriter(w io.Writer) *Writer {
	return &Writer{w: w, k: keepNL | keepTab | keepCRLF}
}

func (t *Writer) Write(p []byte) (int, error) {
	src := p
	if len(t.held) > 0 {
		src = append(t.held, p...)
	}
	out, n := escape(make([]byte, 0, len(src)+16), src, t.k, false)
	t.held = append([]byte(nil), src[n:]...)
	if len(out) > 0 {
		if _, err := t.w.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush ends the stream: a held tail is written neutralised (it can no longer complete).
func (t *Writer) Flush() error {
	if len(t.held) == 0 {
		return nil
	}
	out, _ := escape(nil, t.held, t.k, true)
	t.held = nil
	_, err := t.w.Write(out)
	return err
}

// EscapeJSON is JSON text with DEL and the C1 controls, which JSON lets a string hold
// raw, written as \u escapes: the same JSON to a decoder, and nothing a terminal obeys
// when it is printed (encoding/json already escapes C0 and makes bad UTF-8 U+FFFD). In
// valid JSON these runes occur only inside strings, where \u00XX means the same; a byte
// that is not UTF-8 becomes \ufffd, as encoding/json would have written it.
func EscapeJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case r == 0x7f || (r >= 0x80 && r <= 0x9f) || hidesText(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}
