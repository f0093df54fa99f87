package keymask

import "io"

// Stream masks a byte stream, however it is cut into writes. Flush writes out all
// that can no longer be part of a match; Close writes the rest.
type Stream struct {
	w   io.Writer
	m   *Masker
	buf []byte
	// join holds texts a client has just before the stream's first byte (header values,
	// see MaskHeader), each ending in a possible start of the key. Until the first byte
	// is released a match may begin in one and end in buf; both parts are masked (the
	// caller sends a held text's masked bytes). After it, none can: released bytes lie
	// beyond a line break or maxLen-1 bytes of hold, which no match spans.
	join [][]byte
	tmp  []byte
}

func (s *Stream) Write(p []byte) (int, error) {
	if len(s.m.needles) == 0 {
		return s.w.Write(p)
	}
	// In slices, so the buffer never holds more than one slice and the hold-back, however
	// large the write.
	const slice = 32 << 10
	for off := 0; off < len(p); off += slice {
		s.buf = append(s.buf, p[off:min(off+slice, len(p))]...)
		s.m.MaskInPlace(s.buf)
		for _, j := range s.join {
			s.tmp = append(append(s.tmp[:0], j...), s.buf...)
			if s.m.MaskInPlace(s.tmp) {
				copy(j, s.tmp)
				copy(s.buf, s.tmp[len(j):])
			}
		}
		if err := s.release(len(s.buf) - s.m.hold(s.buf)); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

// NewStream masks what is written to w.
func NewStream(w io.Writer, m *Masker) *Stream { return &Stream{w: w, m: m} }

// joinLive reports whether an occurrence of at least least characters that begins in a
// joined text still runs to the end of what is held, so the next bytes could complete it.
func (s *Stream) joinLive(least int) bool {
	for _, j := range s.join {
		s.tmp = append(append(s.tmp[:0], j...), s.buf...)
		if i := s.m.cutAt(s.tmp, least, false); i >= 0 && i < len(j) {
			return true
		}
	}
	return false
}

// maskJoinCut masks an occurrence of at least least characters that begins in a joined
// text and is cut off by the end of the stream, in the text and in buf: nothing can
// complete it any more, and it is a piece of the key.
func (s *Stream) maskJoinCut(least int) {
	for _, j := range s.join {
		s.tmp = append(append(s.tmp[:0], j...), s.buf...)
		if i := s.m.cutAt(s.tmp, least, true); i >= 0 && i < len(j) {
			for k := i; k < len(s.tmp); k++ {
				s.tmp[k] = '*'
			}
			copy(j, s.tmp)
			copy(s.buf, s.tmp[len(j):])
		}
	}
}

func (s *Stream) release(n int) error {
	if n <= 0 {
		return nil
	}
	s.join = nil
	_, err := s.w.Write(s.buf[:n])
	rest := copy(s.buf, s.buf[n:])
	s.buf = s.buf[:rest]
	if cap(s.buf) > 1<<20 && rest < 64<<10 {
		// Do not keep a large body's buffer for the life of a long stream.
		s.buf = append([]byte(nil), s.buf...)
	}
	return err
}

// Close writes what is held back: at the end of the stream a held prefix can no longer
// grow into a match.
func (s *Stream) Close() error {
	return s.release(len(s.buf))
}

// JoinLive reports whether a held header must still wait: an occurrence of MinHold
// characters or more that begins in a joined header text runs to the end of what is held.
func (s *Stream) JoinLive() bool { return s.joinLive(MinHold) }

// MaskJoinCut masks, at the end of the body, an occurrence of MinHold characters or more
// that begins in a joined header text and that the end cut off.
func (s *Stream) MaskJoinCut() { s.maskJoinCut(MinHold) }
