// Package keymask finds the broker's API key in what goes back to the jail and overwrites
// it: in any form a client could turn back into the key (Masker), in a byte stream however
// it is cut into writes (Stream), spread over the events of an SSE stream or the string
// values of a JSON document (SSE, MaskJoinedJSON), and in response header names and values,
// joined onto the body's first bytes (MaskHeader). It knows nothing of HTTP routing; the
// broker's jail writer drives it.
package keymask

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
)

// Masker finds the API key in the forms a hostile or careless upstream could echo it in
// and that a client in the jail could turn back into the key:
//
//   - raw bytes;
//   - each byte possibly escaped on its own, in any mix: JSON \u00XX, \xXX, a backslash
//     before punctuation (\/ \- ...), URL %XX (either hex case), HTML &#NNN; / &#xXX;;
//   - base64 (standard and URL alphabets, at each of the three alignments a key can have
//     inside a longer encoded string; only the characters fixed by the key's own bits);
//   - hex;
//   - UTF-16 and UTF-32, either byte order.
//
// Matching ignores ASCII case throughout: a key with its case changed (an upper-cased
// error message, a case-folded header name) is still most of a key. Escapes may also be
// doubled once (%2573, \\u0073), as a body quoted twice would carry them.
//
// Every byte of a match is replaced by '*', so lengths (and Content-Length) never change.
// A match never spans a raw CR or LF: none of the forms contains one and the key cannot
// (New refuses a key file with a line break), which lets a stream release everything up
// to its last line break at once (an SSE frame is never held back).
type Masker struct {
	needles [][]byte
	// bits[i][j] is how many bits of the key needles[i][j] carries: 8 for a raw or
	// UTF-16/32 character, 6 for base64, 4 for hex, 0 for the zero padding of UTF-16/32.
	// A cut-off occurrence is a piece of the key only by the bits it carries: three
	// trailing zero bytes begin the UTF-32 form of every key and hold none of it, "736"
	// begins its hex form and holds a byte and a half.
	bits   [][]uint8
	first  [256]bool // bytes a match can start with (a needle's first byte or an escape)
	maxLen int       // longest byte span one match can cover
}

// maxToken is the longest escaped form of one byte the masker decodes (&#0000115;).
const maxToken = 10

// New returns the masker of secret (none: masks nothing).
func New(secret []byte) *Masker {
	m := &Masker{}
	if len(secret) == 0 {
		return m
	}
	// add takes a needle whose byte j carries per bits of the key when j%width == at.
	add := func(n []byte, width, at int, per uint8) {
		// Too short a fragment would mask innocent text; 8 characters of base64 still
		// carry 6 bytes of the key.
		if len(n) >= 8 {
			b := make([]uint8, len(n))
			for j := range b {
				if j%width == at {
					b[j] = per
				}
			}
			m.needles = append(m.needles, n)
			m.bits = append(m.bits, b)
		}
	}
	add(append([]byte(nil), secret...), 1, 0, 8)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for align := 0; align < 3; align++ {
			add(base64Core(enc, secret, align), 1, 0, 6)
		}
	}
	add([]byte(hex.EncodeToString(secret)), 1, 0, 4)
	// UTF-16 and UTF-32, either byte order: an upstream may answer in a charset the
	// client asked for or simply chose.
	for _, width := range []int{2, 4} {
		le, be := make([]byte, 0, width*len(secret)), make([]byte, 0, width*len(secret))
		for _, c := range secret {
			le = append(append(le, c), make([]byte, width-1)...)
			be = append(append(be, make([]byte, width-1)...), c)
		}
		add(le, width, 0, 8)
		add(be, width, width-1, 8)
	}
	m.first['%'], m.first['\\'], m.first['&'] = true, true, true
	for i, n := range m.needles {
		n = bytes.ToLower(n)
		m.needles[i] = n
		m.first[n[0]] = true
		m.first[upper(n[0])] = true
		if l := len(n) * maxToken; l > m.maxLen {
			m.maxLen = l
		}
	}
	return m
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// base64Core is the part of the base64 encoding of secret, preceded by align unknown
// bytes and followed by unknown bytes, whose characters depend only on secret's bits.
func base64Core(enc *base64.Encoding, secret []byte, align int) []byte {
	buf := make([]byte, align+len(secret))
	copy(buf[align:], secret)
	s := enc.WithPadding(base64.NoPadding).EncodeToString(buf)
	var out []byte
	for j := 0; j < len(s); j++ {
		if 6*j >= 8*align && 6*j+6 <= 8*(align+len(secret)) {
			out = append(out, s[j])
		}
	}
	return out
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// escapedAt decodes an escape of one byte starting at b[i] (see masker); n is 0 when
// there is none.
func escapedAt(b []byte, i int) (v byte, n int) {
	hexN := func(from, count int) (int, bool) {
		if from+count > len(b) {
			return 0, false
		}
		x := 0
		for k := from; k < from+count; k++ {
			d, ok := unhex(b[k])
			if !ok {
				return 0, false
			}
			x = x<<4 | int(d)
		}
		return x, true
	}
	switch b[i] {
	case '%':
		if x, ok := hexN(i+1, 2); ok {
			if x == '%' {
				if y, ok := hexN(i+3, 2); ok {
					return byte(y), 5 // %25XX: encoded twice
				}
			}
			return byte(x), 3
		}
	case '\\':
		if i+1 >= len(b) {
			return 0, 0
		}
		switch c := b[i+1]; {
		case c == '\\' && i+2 < len(b) && b[i+2] == 'u':
			if x, ok := hexN(i+3, 4); ok && x < 0x80 {
				return byte(x), 7 // \\u00XX: escaped twice
			}
			return c, 2
		case c == 'u':
			if x, ok := hexN(i+2, 4); ok && x < 0x80 {
				return byte(x), 6
			}
		case c == 'x':
			if x, ok := hexN(i+2, 2); ok {
				return byte(x), 4
			}
		case c > ' ' && c < 0x7f && !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'):
			return c, 2
		}
	case '&':
		if i+2 >= len(b) || b[i+1] != '#' {
			return 0, 0
		}
		base, k := 10, i+2
		if b[k] == 'x' || b[k] == 'X' {
			base, k = 16, k+1
		}
		x, digits := 0, 0
		for ; k < len(b) && k-i < maxToken; k++ {
			if b[k] == ';' {
				if digits == 0 || x >= 0x80 {
					return 0, 0
				}
				return byte(x), k + 1 - i
			}
			d, ok := unhex(b[k])
			if !ok || (base == 10 && d > 9) {
				return 0, 0
			}
			x = x*base + int(d)
			digits++
			if x >= 0x80 {
				return 0, 0
			}
		}
	}
	return 0, 0
}

// matchAt returns the end of an occurrence of needle starting at b[i], or -1.
func matchAt(b []byte, i int, needle []byte) int {
	if len(needle) == 0 {
		return i
	}
	if i >= len(b) {
		return -1
	}
	if lower(b[i]) == needle[0] {
		if end := matchAt(b, i+1, needle[1:]); end >= 0 {
			return end
		}
	}
	if v, n := escapedAt(b, i); n > 0 && lower(v) == needle[0] {
		return matchAt(b, i+n, needle[1:])
	}
	return -1
}

// MaskInPlace overwrites every occurrence in b; it reports whether it found one.
func (m *Masker) MaskInPlace(b []byte) bool {
	if len(m.needles) == 0 {
		return false
	}
	found := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !m.first[c] {
			continue
		}
		var dec byte
		dn := 0
		if c == '%' || c == '\\' || c == '&' {
			dec, dn = escapedAt(b, i)
		}
		for _, n := range m.needles {
			if n[0] != lower(c) && (dn == 0 || n[0] != lower(dec)) {
				continue
			}
			if end := matchAt(b, i, n); end > i {
				for k := i; k < end; k++ {
					b[k] = '*'
				}
				found = true
				i = end - 1
				break
			}
		}
	}
	return found
}

// String masks s.
func (m *Masker) String(s string) string {
	if len(m.needles) == 0 {
		return s
	}
	b := []byte(s)
	if !m.MaskInPlace(b) {
		return s
	}
	return string(b)
}

// hold is how many bytes at the end of b a stream must keep back: a match that starts
// there could still be completed by the next write. Nothing before the last line break
// is ever held.
func (m *Masker) hold(b []byte) int {
	n := m.maxLen - 1
	if n < 0 {
		n = 0
	}
	if n > len(b) {
		n = len(b)
	}
	for k := len(b) - 1; k >= len(b)-n; k-- {
		if b[k] == '\n' || b[k] == '\r' {
			return len(b) - 1 - k
		}
	}
	return n
}

// cutAt returns the earliest start of an occurrence that the end of b cuts off holding
// more than least-1 whole characters of the key, by the bits it carries (sure: matched
// whole; else an escape cut off counts too, for a caller deciding whether to wait, not
// whether to mask), or -1. Only the last maxLen bytes can hold one.
func (m *Masker) cutAt(b []byte, least int, sure bool) int {
	for i := max(len(b)-m.maxLen, 0); i < len(b); i++ {
		c := b[i]
		if !m.first[c] {
			continue
		}
		// As in MaskInPlace, only needles that can start here are tried: a plain byte
		// starts only those that begin with it (an escape, any).
		esc := c == '%' || c == '\\' || c == '&'
		for ni, n := range m.needles {
			if !esc && n[0] != lower(c) {
				continue
			}
			if p := m.partialAt(b, i, ni); p.keyBits(sure) > 8*(least-1) {
				return i
			}
		}
	}
	return -1
}
