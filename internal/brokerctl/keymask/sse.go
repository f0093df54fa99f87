package keymask

import (
	"bytes"
	"unicode/utf8"
)

// SSE catches the key when an upstream spreads it over several SSE events, as a
// model's streamed text naturally is (one delta per few characters): a client that joins
// the deltas would rebuild a key that no single frame holds. It keeps the text of the
// stream (the decoded JSON strings of each data line, or the line itself when it is not
// JSON) and masks the bytes of every frame that carry part of an occurrence, in any form
// the masker knows, including escapes nested inside JSON strings.
//
// To mask a part before it is sent, frames are held back while the text so far ends in
// at least MinHold characters that could begin the key; the frame that completes or
// breaks the match releases them. A shorter tail is released at once (an ordinary stream
// is never delayed by a stray "s"), so at most MinHold-1 characters of the key can reach
// a client before the rest is masked. Held frames are bounded (maxHeld bytes): past it,
// the held tail is masked and everything released.
type SSE struct {
	m       *Masker
	pending []*sseFrame
	base    int // sequence number of pending[0]; frames before it are sent
	// Text is kept per channel: "" joins every string value of the stream, and "k:<name>"
	// the values under one JSON key, so deltas interleaved with other fields ("type":
	// "text_delta") still join up; "n" joins the object names, which a client reads as
	// strings too ({"sk-lev":1} then {"er-...":1}).
	ch map[string]*sseChannel
	// scratch for one JSON string at a time, reused across frames
	tmpText  []byte
	tmpSpans []sseSpan
	// started: a frame was seen (a byte order mark counts only before the first line).
	started bool
	// unbounded: no channel cap (one whole body, whose size bounds the channels).
	unbounded bool
	// overflow: a value needed a channel past MaxChannels. Its text would be joined only
	// on the all-values channel, which other values interleave, so the stream must end.
	overflow bool
}

type sseChannel struct {
	text    []byte    // text of recent frames (sent ones kept as context)
	spans   []sseSpan // where each byte of text came from
	scanned int       // text[:scanned] has been searched for whole occurrences
	// tail is the earliest start of a partial occurrence (one character or more, or an
	// escape cut off) running to the end of text[:scanned], or scanned when there is
	// none. A match that the next text completes starts at or after it, so neither the
	// next search nor the next hold check looks further back: each frame costs what is
	// new plus the live partial, not the masker's whole look-back window per channel.
	tail int
	from int // where the last search started (holdPos starts there too)
}

type sseFrame struct{ b []byte }

// sseSpan locates one text byte in its frame, by the frame's sequence number (no
// pointers: a span per byte of text must not cost the garbage collector).
type sseSpan struct {
	seq        int
	start, end int32
}

const (
	MinHold = 3
	maxHeld = 256 << 10
	// MaxChannels bounds the channels of one stream (each keeps up to about twice the
	// masker's longest match of context). A stream that needs more ends (ErrSSEKeys):
	// a value with no channel of its own would only join on the all-values channel, where
	// other values come between its parts.
	MaxChannels = 128
)

func (s *SSE) channel(name string) *sseChannel {
	if s.ch == nil {
		s.ch = map[string]*sseChannel{}
	}
	c := s.ch[name]
	if c == nil {
		if len(s.ch) >= MaxChannels && !s.unbounded {
			s.overflow = true
			return nil
		}
		c = &sseChannel{}
		s.ch[name] = c
	}
	return c
}

func (s *SSE) appendText(key string, text []byte, spans []sseSpan) {
	s.appendTo("", text, spans)
	s.appendTo("k:"+key, text, spans)
}

// appendTo adds text to one channel.
func (s *SSE) appendTo(ch string, text []byte, spans []sseSpan) {
	if c := s.channel(ch); c != nil {
		c.text = append(c.text, text...)
		c.spans = append(c.spans, spans...)
	}
}

// addFrame appends the text of frame f: the data lines, as decoded JSON string values
// when they hold JSON, else as they are; the values of the other fields (event, id,
// retry) and of comments, each on its own channel, and any other line whole. Lines end at
// CRLF, CR or LF, as the SSE format has it, and a byte order mark before the stream's first
// line is skipped, as a client skips it: a client reads every one of these, so each is
// text it could join across events.
func (s *SSE) addFrame(f *sseFrame, seq int) {
	b := f.b
	off := 0
	if !s.started {
		s.started = true
		if bytes.HasPrefix(b, []byte("\xef\xbb\xbf")) {
			off = 3
		}
	}
	for off < len(b) {
		end := bytes.IndexAny(b[off:], "\r\n")
		next := len(b)
		if end < 0 {
			end = len(b)
		} else {
			end += off
			next = end + 1
			if b[end] == '\r' && next < len(b) && b[next] == '\n' {
				next++
			}
		}
		line := b[off:end]
		if bytes.HasPrefix(line, []byte("data:")) {
			start := off + 5
			if start < end && b[start] == ' ' {
				start++
			}
			content := b[start:end]
			trimmed := bytes.TrimLeft(content, " \t")
			if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[' || trimmed[0] == '"') {
				s.jsonStrings(f, seq, start, start+len(content))
			} else {
				s.appendRaw("", f, seq, start, end)
			}
		} else if len(line) > 0 {
			field, _, colon := bytes.Cut(line, []byte(":"))
			switch name := string(field); {
			case colon && (name == "" || name == "event" || name == "id" || name == "retry"):
				start := off + len(field) + 1
				if start < end && b[start] == ' ' {
					start++
				}
				s.appendRaw("f:"+name, f, seq, start, end)
			default:
				s.appendRaw("f:*", f, seq, off, end)
			}
		}
		off = next
	}
}

// appendRaw adds f.b[from:to] as it is, to the all-values channel ("") or to one of its
// own (a field's).
func (s *SSE) appendRaw(ch string, f *sseFrame, seq, from, to int) {
	if from >= to {
		return
	}
	text := s.tmpText[:0]
	spans := s.tmpSpans[:0]
	for k := from; k < to; k++ {
		text = append(text, f.b[k])
		spans = append(spans, sseSpan{seq, int32(k), int32(k + 1)})
	}
	if ch == "" {
		s.appendText("", text, spans)
	} else {
		s.appendTo(ch, text, spans)
	}
	s.tmpText, s.tmpSpans = text[:0], spans[:0]
}

// jsonStrings adds the decoded contents of every JSON string value in f.b[from:to], to
// the all-values channel and to the channel of the key it belongs to, and every object
// name to the names channel. Names stay off the all-values channel: between two values
// they would break the join of a key spread over values of different keys.
func (s *SSE) jsonStrings(f *sseFrame, seq, from, to int) {
	b := f.b
	key := ""
	text, spans := s.tmpText[:0], s.tmpSpans[:0]
	defer func() { s.tmpText, s.tmpSpans = text[:0], spans[:0] }()
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
				s.appendTo("n", text, spans)
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
			case 'x': // not JSON, but lenient decoders take it
				if k+4 <= to {
					hi, ok1 := unhex(b[k+2])
					lo, ok2 := unhex(b[k+3])
					if ok1 && ok2 {
						n = 4
						dec = []byte{hi<<4 | lo}
						break
					}
				}
				dec = []byte{'x'}
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
				spans = append(spans, sseSpan{seq, int32(k), int32(k + n)})
			}
			k += n
		default:
			text = append(text, c)
			spans = append(spans, sseSpan{seq, int32(k), int32(k + 1)})
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

// maskRange masks the frame bytes behind c.text[i:j] that are not sent yet.
func (s *SSE) maskRange(c *sseChannel, i, j int) {
	for k := i; k < j; k++ {
		sp := c.spans[k]
		if sp.seq < s.base {
			continue
		}
		if sp.seq-s.base >= len(s.pending) {
			continue // a frame dropped unsent (overflow)
		}
		b := s.pending[sp.seq-s.base].b
		for x := sp.start; x < sp.end; x++ {
			if b[x] != '\n' && b[x] != '\r' {
				b[x] = '*'
			}
		}
	}
}

// partial is an occurrence of a needle that the end of the text cuts off.
type partial struct {
	n    int // needle bytes matched (0: none); a cut-off escape counts as one
	bits int // bits of the key they carry, matched whole (Masker.bits)
	cut  int // bits of the key an escape cut off by the end could still carry
}

// keyBits is how many bits of the key the partial holds: sure, only those matched
// whole, which is what may be masked (nothing can complete the rest at the end of the
// text); else a cut-off escape counts too, which is what is worth waiting for.
func (p partial) keyBits(sure bool) int {
	if sure {
		return p.bits
	}
	return p.bits + p.cut
}

// holdBits: a partial occurrence is held (and, when cut off for good, masked) once it
// carries more than MinHold-1 whole characters of the key, so at most that much of the
// key, in any form, reaches a client before the rest is masked.
const holdBits = 8*(MinHold-1) + 1

// partialAt reports how much of needle ni text[i:] matches when it runs out before the
// needle does (n 0: no partial match).
func (m *Masker) partialAt(b []byte, i, ni int) partial {
	return partialLen(b, i, m.needles[ni], m.bits[ni], 0, 0)
}

func partialLen(b []byte, i int, needle []byte, bits []uint8, j, got int) partial {
	if j == len(needle) {
		return partial{} // a whole match; handled by the full scan
	}
	if i >= len(b) {
		return partial{n: j, bits: got}
	}
	if lower(b[i]) == needle[j] {
		if p := partialLen(b, i+1, needle, bits, j+1, got+int(bits[j])); p.n > 0 {
			return p
		}
	}
	if v, n := escapedAt(b, i); n > 0 && lower(v) == needle[j] {
		return partialLen(b, i+n, needle, bits, j+1, got+int(bits[j]))
	}
	if (b[i] == '%' || b[i] == '\\' || b[i] == '&') && len(b)-i < maxToken {
		// an escape cut off by the end of the text so far
		return partial{n: j + 1, bits: got, cut: int(bits[j])}
	}
	return partial{}
}

// maskWhole masks every whole occurrence in the channel's text. Only starts from which
// a match could reach the new text are searched again.
func (s *SSE) maskWhole(c *sseChannel) {
	m := s.m
	// A whole occurrence not found before either lies in the new text or starts in the
	// partial occurrence that ran to the old end (tail): no start before it can reach
	// the new text.
	from := max(min(c.tail, c.scanned), c.scanned-m.maxLen, 0)
	c.from = from
	c.scanned = len(c.text)
	for i := from; i < len(c.text); i++ {
		if !m.first[c.text[i]] {
			continue
		}
		for _, n := range m.needles {
			if end := matchAt(c.text, i, n); end > i {
				s.maskRange(c, i, end)
				for k := i; k < end; k++ {
					c.text[k] = '*'
				}
				i = end - 1
				break
			}
		}
	}
}

// holdPos is the earliest start of a partial occurrence at the end of the text holding
// more than MinHold-1 characters of the key, by the bits it carries (holdBits;
// len(text) when there is none): its frame and every later one are held. sure: count
// only what is matched whole, for a caller about to mask it (a cut-off escape is worth
// waiting for, not masking). Zero padding of the UTF-16 and UTF-32 forms counts for
// nothing either way.
// It also records the channel's tail (see sseChannel.tail) for the next frame.
func (c *sseChannel) holdPos(m *Masker, sure bool) int {
	from := max(len(c.text)-m.maxLen, c.from, 0)
	tail := len(c.text)
	for i := from; i < len(c.text); i++ {
		if !m.first[c.text[i]] {
			continue
		}
		for ni := range m.needles {
			p := m.partialAt(c.text, i, ni)
			if p.n >= 1 && tail == len(c.text) {
				tail = i
			}
			if p.keyBits(sure) >= holdBits {
				c.tail = tail
				return i
			}
		}
	}
	c.tail = tail
	return len(c.text)
}

// Push adds one complete frame and returns the frames that may be sent now, in order.
func (s *SSE) Push(frame []byte) [][]byte {
	f := &sseFrame{b: append([]byte(nil), frame...)}
	s.pending = append(s.pending, f)
	s.addFrame(f, s.base+len(s.pending)-1)
	if s.overflow {
		// Not a byte of this frame goes out: part of its text has no channel. What was
		// pushed before it is released by finish, masked as at any end of stream.
		s.pending = s.pending[:len(s.pending)-1]
		return nil
	}
	held := 0
	for _, p := range s.pending {
		held += len(p.b)
	}
	// The earliest frame any channel holds, and every later one, wait.
	first := len(s.pending)
	for _, c := range s.ch {
		s.maskWhole(c)
		hold := c.holdPos(s.m, false)
		if hold == len(c.text) {
			continue
		}
		if held > maxHeld {
			s.maskRange(c, c.holdPos(s.m, true), len(c.text))
			continue
		}
		// The first unsent frame with a part of the partial occurrence (its start may be
		// in a frame already sent, up to MinHold-1 characters).
		for k := hold; k < len(c.spans); k++ {
			if seq := c.spans[k].seq; seq >= s.base {
				first = min(first, seq-s.base)
				break
			}
		}
	}
	out := make([][]byte, 0, first)
	for _, p := range s.pending[:first] {
		out = append(out, p.b)
	}
	s.pending = s.pending[first:]
	s.base += first
	for _, c := range s.ch {
		c.trim(s.base)
	}
	return out
}

// trim drops context no match can reach back to.
func (c *sseChannel) trim(base int) {
	firstHeld := len(c.text)
	for k := len(c.spans) - 1; k >= 0 && c.spans[k].seq >= base; k-- {
		firstHeld = k
	}
	// Nothing before the live partial occurrence (tail) can be part of a later match, and
	// nothing before the first held frame needs masking, so only the text from the
	// earlier of the two is kept: a channel costs its live partial and held frames, not a
	// look-back window. Trimmed in steps, not per frame, so the copying stays linear.
	if cut := min(firstHeld, c.tail, c.scanned); cut > 0 && cut >= len(c.text)/2 {
		c.text = append(c.text[:0], c.text[cut:]...)
		c.spans = append(c.spans[:0], c.spans[cut:]...)
		c.scanned = max(c.scanned-cut, 0)
		c.tail = max(c.tail-cut, 0)
		c.from = max(c.from-cut, 0)
	}
}

// Finish releases what is held at the end of the stream, masking a held partial
// occurrence: nothing more can complete it, and it is a piece of the key.
func (s *SSE) Finish() [][]byte {
	out := s.Release()
	s.pending, s.ch = nil, nil
	return out
}

// Release sends every held frame now, its part of a held partial occurrence masked as at
// the end of the stream. The channels keep their text, so text pushed later that
// completes the occurrence is still found and masked in its own frames. For a caller
// that must send something it cannot push (a line too long to hold) in order.
func (s *SSE) Release() [][]byte {
	for _, c := range s.ch {
		s.maskRange(c, c.holdPos(s.m, true), len(c.text))
	}
	out := make([][]byte, 0, len(s.pending))
	for _, p := range s.pending {
		out = append(out, p.b)
	}
	s.base += len(s.pending)
	s.pending = nil
	for _, c := range s.ch {
		c.trim(s.base)
	}
	return out
}

// JoinLimit is the largest plain response whose JSON string values are joined and masked
// as one text (MaskJoinedJSON); a larger body is masked per form in its bytes only.
const JoinLimit = 256 << 10

// MaskJoinedJSON masks, in place, the key spread over several string values of one JSON
// document ({"a":"sk-lev","b":"er-..."}), as push does for the events of a stream.
func MaskJoinedJSON(m *Masker, body []byte) {
	if len(m.needles) == 0 {
		return
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[') {
		return
	}
	// Every key gets its channel: the body is at most JoinLimit, and each text byte sits
	// in two channels (all values, its key's) however many there are.
	s := &SSE{m: m, pending: []*sseFrame{{b: body}}, unbounded: true}
	s.jsonStrings(s.pending[0], 0, 0, len(body))
	for _, c := range s.ch {
		s.maskWhole(c)
	}
	s.Finish()
}

// NewSSE masks a stream of frames (Push) for m.
func NewSSE(m *Masker) *SSE { return &SSE{m: m} }

// Overflow reports that a value needed a channel past MaxChannels: the stream must end.
func (s *SSE) Overflow() bool { return s.overflow }

// Started reports whether a frame was pushed (or MarkStarted called): a byte order mark
// counts only before the first line.
func (s *SSE) Started() bool { return s.started }

// MarkStarted notes that the stream's first bytes went out past the masker (a long line
// sent as it came), so a byte order mark after them is no longer the stream's first.
func (s *SSE) MarkStarted() { s.started = true }
