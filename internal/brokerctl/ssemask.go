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
	// Text is kept per channel: "" joins every string value of the stream, and "k:<name>"
	// the values under one JSON key, so deltas interleaved with other fields ("type":
	// "text_delta") still join up.
	ch map[string]*sseChannel
}

type sseChannel struct {
	text  []byte    // text of recent frames (sent ones kept as context)
	spans []sseSpan // where each byte of text came from
}

type sseFrame struct{ b []byte }

// sseSpan locates one text byte in its frame; f is nil once the frame is sent.
type sseSpan struct {
	f          *sseFrame
	start, end int
}

const (
	minHold     = 3
	maxHeld     = 256 << 10
	maxChannels = 64
)

func (s *sseMasker) channel(name string) *sseChannel {
	if s.ch == nil {
		s.ch = map[string]*sseChannel{}
	}
	c := s.ch[name]
	if c == nil {
		if len(s.ch) >= maxChannels {
			return nil
		}
		c = &sseChannel{}
		s.ch[name] = c
	}
	return c
}

func (s *sseMasker) appendText(key string, text []byte, spans []sseSpan) {
	for _, name := range []string{"", "k:" + key} {
		if c := s.channel(name); c != nil {
			c.text = append(c.text, text...)
			c.spans = append(c.spans, spans...)
		}
	}
}

// addFrame appends the text of frame f: the data lines, as decoded JSON string values
// when they hold JSON, else as they are.
func (s *sseMasker) addFrame(f *sseFrame) {
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
				s.jsonStrings(f, start, start+len(content))
			} else {
				var text []byte
				var spans []sseSpan
				for k := start; k < start+len(content); k++ {
					text = append(text, b[k])
					spans = append(spans, sseSpan{f, k, k + 1})
				}
				s.appendText("", text, spans)
			}
		}
		off = end + 1
	}
}

// jsonStrings adds the decoded contents of every JSON string value in f.b[from:to], to
// the all-values channel and to the channel of the key it belongs to. Object keys are
// names, not text.
func (s *sseMasker) jsonStrings(f *sseFrame, from, to int) {
	b := f.b
	key := ""
	var text []byte
	var spans []sseSpan
	in := false
	for k := from; k < to; {
		c := b[k]
		if !in {
			in = c == '"'
			text, spans = text[:0], spans[:0]
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
				key = string(text)
			} else {
				s.appendText(key, text, spans)
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
func (c *sseChannel) maskRange(i, j int) {
	for k := i; k < j; k++ {
		sp := c.spans[k]
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
	if lower(b[i]) == needle[0] {
		if n := partialLen(b, i+1, needle[1:], matched+1); n > 0 {
			return n
		}
	}
	if v, n := escapedAt(b, i); n > 0 && lower(v) == needle[0] {
		return partialLen(b, i+n, needle[1:], matched+1)
	}
	if (b[i] == '%' || b[i] == '\\' || b[i] == '&') && len(b)-i < maxToken {
		return matched + 1 // an escape cut off by the end of the text so far
	}
	return 0
}

// maskWhole masks every whole occurrence in the channel's text.
func (c *sseChannel) maskWhole(m *masker) {
	for i := 0; i < len(c.text); i++ {
		if !m.first[c.text[i]] {
			continue
		}
		for _, n := range m.needles {
			if end := matchAt(c.text, i, n); end > i {
				c.maskRange(i, end)
				for k := i; k < end; k++ {
					c.text[k] = '*'
				}
				i = end - 1
				break
			}
		}
	}
}

// holdPos is the earliest start of a long enough partial occurrence at the end of the
// text (len(text) when there is none): its frame and every later one are held.
func (c *sseChannel) holdPos(m *masker) int {
	from := len(c.text) - m.maxLen
	if from < 0 {
		from = 0
	}
	for i := from; i < len(c.text); i++ {
		for _, n := range m.needles {
			if partialLen(c.text, i, n, 0) >= minHold {
				return i
			}
		}
	}
	return len(c.text)
}

// push adds one complete frame and returns the frames that may be sent now, in order.
func (s *sseMasker) push(frame []byte) [][]byte {
	f := &sseFrame{b: append([]byte(nil), frame...)}
	s.pending = append(s.pending, f)
	s.addFrame(f)
	held := 0
	for _, p := range s.pending {
		held += len(p.b)
	}
	// The earliest frame any channel holds, and every later one, wait.
	first := len(s.pending)
	for _, c := range s.ch {
		c.maskWhole(s.m)
		hold := c.holdPos(s.m)
		if hold == len(c.text) {
			continue
		}
		if held > maxHeld {
			c.maskRange(hold, len(c.text))
			continue
		}
		// The first unsent frame with a part of the partial occurrence (its start may be
		// in a frame already sent, up to minHold-1 characters).
		var hf *sseFrame
		for k := hold; k < len(c.spans) && hf == nil; k++ {
			hf = c.spans[k].f
		}
		for i, p := range s.pending {
			if p == hf && i < first {
				first = i
			}
		}
	}
	out := make([][]byte, 0, first)
	for _, p := range s.pending[:first] {
		out = append(out, p.b)
		s.sent(p)
	}
	s.pending = s.pending[first:]
	for _, c := range s.ch {
		c.trim(s.m)
	}
	return out
}

// sent forgets a frame's bytes: its text stays as context for later matches.
func (s *sseMasker) sent(f *sseFrame) {
	for _, c := range s.ch {
		for k := range c.spans {
			if c.spans[k].f == f {
				c.spans[k].f = nil
			}
		}
	}
}

// trim drops context no match can reach back to.
func (c *sseChannel) trim(m *masker) {
	firstHeld := len(c.text)
	for k, sp := range c.spans {
		if sp.f != nil {
			firstHeld = k
			break
		}
	}
	if cut := firstHeld - m.maxLen; cut > 0 {
		c.text = append(c.text[:0], c.text[cut:]...)
		c.spans = append(c.spans[:0], c.spans[cut:]...)
	}
}

// finish releases what is held at the end of the stream, masking a held partial
// occurrence: nothing more can complete it, and it is a piece of the key.
func (s *sseMasker) finish() [][]byte {
	var out [][]byte
	for _, c := range s.ch {
		c.maskRange(c.holdPos(s.m), len(c.text))
	}
	for _, p := range s.pending {
		out = append(out, p.b)
	}
	s.pending, s.ch = nil, nil
	return out
}
