package brokerctl

import (
	"bytes"
	"unicode/utf8"
)

// sseMasker catches the key when an upstream spreads it over several SSE events, as a
// model's streamed text naturally is (one delta per few characters): a client that joins
// the deltas would rebuild a key that no single frame holds. It keeps the text of the
// stream (the decoded JSON strings of each data line, or the line itself when it is not
// JSON) and masks the bytes of every frame that carry part of an occurrence, in any form
// the masker knows, including escapes nested inside JSON strings.
//
// To mask a part before it is sent, frames are held back while the text so far ends in
// at least minHold characters that could begin the key; the frame that completes or
// breaks the match releases them. A shorter tail is released at once (an ordinary stream
// is never delayed by a stray "s"), so at most minHold-1 characters of the key can reach
// a client before the rest is masked. Held frames are bounded (maxHeld bytes): past it,
// the held tail is masked and everything released.
type sseMasker struct {
	m       *masker
	pending []*sseFrame
	text    []byte    // text of recent frames (sent ones kept as context)
	spans   []sseSpan // where each byte of text came from
}

type sseFrame struct{ b []byte }

// sseSpan locates one text byte in its frame; f is nil once the frame is sent.
type sseSpan struct {
	f          *sseFrame
	start, end int
}

const (
	minHold = 3
	maxHeld = 256 << 10
)

// textOf appends the text of frame f to dst/spans.
func textOf(f *sseFrame, text []byte, spans []sseSpan) ([]byte, []sseSpan) {
	b := f.b
	for off := 0; off < len(b); {
		end := bytes.IndexByte(b[off:], '\n')
		if end < 0 {
			end = len(b)
		} else {
			end += off
		}
		line := b[off:end]
		if bytes.HasPrefix(line, []byte("data:")) {
			start := off + 5
			if start < end && b[start] == ' ' {
				start++
			}
			content := bytes.TrimRight(b[start:end], "\r")
			trimmed := bytes.TrimLeft(content, " \t")
			if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[' || trimmed[0] == '"') {
				text, spans = jsonStrings(f, start, start+len(content), text, spans)
			} else {
				for k := start; k < start+len(content); k++ {
					text = append(text, b[k])
					spans = append(spans, sseSpan{f, k, k + 1})
				}
			}
		}
		off = end + 1
	}
	return text, spans
}

// jsonStrings appends the decoded contents of every JSON string value in f.b[from:to]
// (object keys are names, not text, and would only separate the pieces).
func jsonStrings(f *sseFrame, from, to int, text []byte, spans []sseSpan) ([]byte, []sseSpan) {
	b := f.b
	in := false
	mark := 0
	for k := from; k < to; {
		c := b[k]
		if !in {
			in = c == '"'
			mark = len(text)
			k++
			continue
		}
		switch {
		case c == '"':
			in = false
			k++
			next := k
			for next < to && (b[next] == ' ' || b[next] == '\t') {
				next++
			}
			if next < to && b[next] == ':' {
				text, spans = text[:mark], spans[:mark]
			}
		case c == '\\' && k+1 < to:
			n, dec := 2, []byte(nil)
			switch e := b[k+1]; e {
			case 'n':
				dec = []byte{'\n'}
			case 't':
				dec = []byte{'\t'}
			case 'r':
				dec = []byte{'\r'}
			case 'b', 'f':
				dec = []byte{' '}
			case 'u':
				if v, ok := hex4(b, k+2, to); ok {
					n = 6
					dec = utf8.AppendRune(nil, rune(v))
				} else {
					dec = []byte{'u'}
				}
			default:
				dec = []byte{e}
			}
			for _, d := range dec {
				text = append(text, d)
				spans = append(spans, sseSpan{f, k, k + n})
			}
			k += n
		default:
			text = append(text, c)
			spans = append(spans, sseSpan{f, k, k + 1})
			k++
		}
	}
	return text, spans
}

func hex4(b []byte, at, to int) (int, bool) {
	if at+4 > to {
		return 0, false
	}
	x := 0
	for k := at; k < at+4; k++ {
		d, ok := unhex(b[k])
		if !ok {
			return 0, false
		}
		x = x<<4 | int(d)
	}
	return x, true
}

// maskRange masks the frame bytes behind text[i:j] that are not sent yet.
func (s *sseMasker) maskRange(i, j int) {
	for k := i; k < j; k++ {
		sp := s.spans[k]
		if sp.f == nil {
			continue
		}
		for x := sp.start; x < sp.end; x++ {
			if sp.f.b[x] != '\n' && sp.f.b[x] != '\r' {
				sp.f.b[x] = '*'
			}
		}
	}
}

// partialLen reports how many needle bytes text[i:] matches when it runs out before the
// needle does (0: no partial match).
func partialLen(b []byte, i int, needle []byte, matched int) int {
	if len(needle) == 0 {
		return 0 // a whole match; handled by the full scan
	}
	if i >= len(b) {
		return matched
	}
	if b[i] == needle[0] {
		if n := partialLen(b, i+1, needle[1:], matched+1); n > 0 {
			return n
		}
	}
	if v, n := escapedAt(b, i); n > 0 && v == needle[0] {
		return partialLen(b, i+n, needle[1:], matched+1)
	}
	if (b[i] == '%' || b[i] == '\\' || b[i] == '&') && len(b)-i < maxToken {
		return matched + 1 // an escape cut off by the end of the text so far
	}
	return 0
}

// push adds one complete frame and returns the frames that may be sent now, in order.
func (s *sseMasker) push(frame []byte) [][]byte {
	f := &sseFrame{b: append([]byte(nil), frame...)}
	s.pending = append(s.pending, f)
	s.text, s.spans = textOf(f, s.text, s.spans)
	// Whole occurrences anywhere in the text (masking what is not sent yet).
	for i := 0; i < len(s.text); i++ {
		for _, n := range s.m.needles {
			if end := matchAt(s.text, i, n); end > i {
				s.maskRange(i, end)
				for k := i; k < end; k++ {
					s.text[k] = '*'
				}
				i = end - 1
				break
			}
		}
	}
	hold := s.holdPos()
	held := 0
	for _, p := range s.pending {
		held += len(p.b)
	}
	if held > maxHeld {
		s.maskRange(hold, len(s.text))
		hold = len(s.text)
	}
	var holdFrame *sseFrame
	if hold < len(s.text) {
		holdFrame = s.spans[hold].f
	}
	var out [][]byte
	for len(s.pending) > 0 && s.pending[0] != holdFrame {
		out = append(out, s.pending[0].b)
		s.sent(s.pending[0])
		s.pending = s.pending[1:]
	}
	s.trim()
	return out
}

// holdPos is the earliest start of a long enough partial occurrence at the end of the
// text (len(text) when there is none): its frame and every later one are held.
func (s *sseMasker) holdPos() int {
	from := len(s.text) - s.m.maxLen
	if from < 0 {
		from = 0
	}
	for i := from; i < len(s.text); i++ {
		for _, n := range s.m.needles {
			if partialLen(s.text, i, n, 0) >= minHold {
				return i
			}
		}
	}
	return len(s.text)
}

// sent forgets a frame's bytes: its text stays as context for later matches.
func (s *sseMasker) sent(f *sseFrame) {
	for k := range s.spans {
		if s.spans[k].f == f {
			s.spans[k].f = nil
		}
	}
}

// trim drops context no match can reach back to.
func (s *sseMasker) trim() {
	firstHeld := len(s.text)
	for k, sp := range s.spans {
		if sp.f != nil {
			firstHeld = k
			break
		}
	}
	cut := firstHeld - s.m.maxLen
	if cut > 0 {
		s.text = append(s.text[:0], s.text[cut:]...)
		s.spans = append(s.spans[:0], s.spans[cut:]...)
	}
}

// finish releases what is held at the end of the stream, masking a held partial
// occurrence: nothing more can complete it, and it is a piece of the key.
func (s *sseMasker) finish() [][]byte {
	var out [][]byte
	s.maskRange(s.holdPos(), len(s.text))
	for _, p := range s.pending {
		out = append(out, p.b)
	}
	s.pending, s.text, s.spans = nil, nil, nil
	return out
}
