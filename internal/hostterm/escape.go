package hostterm

import (
	"fmt"
	"io"
	"unicode/utf16"
	"unicode/utf8"
)

// The neutraliser: text that came from an agent's side (model output, tool arguments and
// results, a tree blueprint's names, a guest's stderr) must reach a terminal as text only.
// An escape sequence that reached it could retitle the terminal, redraw what the person
// reads (\r, cursor moves, erase-line: the approval prompt made to show another command),
// or write the clipboard (OSC 52); a character drawn as nothing could hide a message or
// split a word. Every character a terminal would not draw as itself (the class is in
// visible.go) is written out visibly instead: C0 and DEL as \x1b, \x7f; a byte that is
// not UTF-8 as \xNN (a lone 0x9b is CSI to a terminal set to Latin-1); any other rune of
// the class as \u009b or, beyond the BMP, \U000e0041. Other printable text, UTF-8
// included, is never changed. lever's host commands and lev's renderer both use it, so
// there is one rule for what may reach a person's terminal.

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
// much of src it consumed; a stream's writes may split anywhere. base carries, from one
// call to the next, whether the last character was drawn as itself and may take a
// variation selector.
func escape(dst, src []byte, k keep, final bool, base *bool) ([]byte, int) {
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
			*base = c > ' ' && c != 0x7f
			i++
			continue
		}
		r, n := utf8.DecodeRune(src[i:])
		switch {
		case r == utf8.RuneError && n == 1 && !final && !utf8.FullRune(src[i:]):
			return dst, i
		case r == utf8.RuneError && n == 1:
			dst = fmt.Appendf(dst, `\x%02x`, c)
			*base = false
		case !shown(r, *base):
			dst = appendRune(dst, r)
			*base = false
		default:
			dst = append(dst, src[i:i+n]...)
			*base = isBase(r)
		}
		i += n
	}
	return dst, len(src)
}

// appendRune writes r escaped: \uXXXX in the BMP, \UXXXXXXXX beyond it (never a short
// form a following hex digit could be read into).
func appendRune(dst []byte, r rune) []byte {
	if r > 0xffff {
		return fmt.Appendf(dst, `\U%08x`, r)
	}
	return fmt.Appendf(dst, `\u%04x`, r)
}

// Escape is s neutralised for a terminal; newline and tab pass, for text laid out in
// lines (a run's result, an error).
func Escape(s string) string {
	var base bool
	b, _ := escape(nil, []byte(s), keepNL|keepTab, true, &base)
	return string(b)
}

// EscapeLine is s neutralised for a terminal with newline and tab made visible too, for
// what must stay on its one line (a progress line, the question of an approval prompt).
func EscapeLine(s string) string {
	var base bool
	b, _ := escape(nil, []byte(s), 0, true, &base)
	return string(b)
}

// Writer neutralises a stream on its way to w. Flush writes what the last Write held
// back (an incomplete UTF-8 sequence, a CR), neutralised, at the stream's end.
type Writer struct {
	w    io.Writer
	k    keep
	held []byte
	base bool // the last character written may take a variation selector
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
	out, n := escape(make([]byte, 0, len(src)+16), src, t.k, false, &t.base)
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
	out, _ := escape(nil, t.held, t.k, true, &t.base)
	t.held = nil
	_, err := t.w.Write(out)
	return err
}

// EscapeJSON is JSON text with every rune of the neutraliser's class that JSON lets a
// string hold raw (DEL, the C1 controls, the format and invisible characters) written as
// \u escapes (a surrogate pair beyond the BMP): the same JSON to a decoder, and nothing a
// terminal obeys or draws as nothing when it is printed (encoding/json already escapes C0
// and makes bad UTF-8 U+FFFD). In valid JSON these runes occur only inside strings, where
// the escape means the same; a byte that is not UTF-8 becomes \ufffd, as encoding/json
// would have written it.
func EscapeJSON(b []byte) []byte {
	out := make([]byte, 0, len(b))
	base := false
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
			base = false
		case r >= utf8.RuneSelf && !shown(r, base):
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
			base = false
		case r == 0x7f:
			out = append(out, `\u007f`...)
			base = false
		default:
			out = append(out, b[i:i+n]...)
			base = isBase(r)
		}
		i += n
	}
	return out
}
