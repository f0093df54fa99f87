package bodypolicy

import (
	"fmt"
	"regexp"
	"strconv"
	"unicode/utf8"
)

// keepString is how much of each string value the scanner keeps (decoded): enough for
// every key, type and URL scheme it judges; longer values are judged by their start.
const keepString = 4096

type jsonFrame struct {
	obj     bool
	key     string // current key (objects), lower case
	keyLong bool
	// tool is set on an element object of the top-level "tools" array: its keys and
	// scalar values, judged when it closes (a key may come before or after "type").
	tool *toolDecl
}

// Scanner states.
const (
	stValue      = iota // a value is expected
	stKeyOrClose        // after '{'
	stKey               // after ',' in an object
	stColon
	stCommaOrClose
	stString
	stLiteral
	stDone
)

// bodyScanner is a strict streaming JSON reader (RFC 8259 grammar, one value) that
// applies the policy above. Memory is bounded: the nesting stack (capped) and one string
// prefix, whatever the body's size.
type bodyScanner struct {
	st      int
	stack   []jsonFrame
	isKey   bool
	str     []byte // decoded prefix of the current string
	strLong bool
	esc     int // 0 none, 1 after '\', 2..5 inside \uXXXX
	lit     []byte
	err     error
	n       int64
	// prevOpen: the last token was '[' (so ']' may close an empty array).
	prevOpen bool
	// u8 checks that string contents are UTF-8 (RFC 8259 8.1), across chunk boundaries.
	u8 utf8Check
	// serverTools counts the allowed server tools declared (one at most).
	serverTools int
}

// utf8Check validates UTF-8 one byte at a time: need continuation bytes are still due, the
// next one in [lo, hi]. Overlong forms, surrogates and code points past U+10FFFF are
// refused, as the encoding's table (Unicode 3.9, table 3-7) has it. A decoder that skips
// the overlong check (some do) would read "\xc1\xb3" as 's' and "toolſ"-like tricks
// with it; the policy reads only what every decoder reads the same way.
type utf8Check struct {
	need   int
	lo, hi byte
}

func (u *utf8Check) feed(c byte) bool {
	if u.need > 0 {
		if c < u.lo || c > u.hi {
			return false
		}
		u.need--
		u.lo, u.hi = 0x80, 0xbf
		return true
	}
	u.lo, u.hi = 0x80, 0xbf
	switch {
	case c < 0x80:
	case c >= 0xc2 && c <= 0xdf:
		u.need = 1
	case c == 0xe0:
		u.need, u.lo = 2, 0xa0
	case c == 0xed:
		u.need, u.hi = 2, 0x9f
	case c >= 0xe1 && c <= 0xef:
		u.need = 2
	case c == 0xf0:
		u.need, u.lo = 3, 0x90
	case c >= 0xf1 && c <= 0xf3:
		u.need = 3
	case c == 0xf4:
		u.need, u.hi = 3, 0x8f
	default:
		return false
	}
	return true
}

const maxDepth = 128

func (s *bodyScanner) fail(format string, args ...any) error {
	if s.err == nil {
		s.err = &policyError{msg: fmt.Sprintf(format, args...)}
	}
	return s.err
}

func (s *bodyScanner) malformed(c byte) error {
	return s.fail("request body is not one well-formed JSON value (byte %d: %q); the broker reads every model-call body", s.n, string(c))
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// write feeds the next bytes.
func (s *bodyScanner) write(p []byte) error {
	for i := 0; i < len(p); i++ {
		if s.err != nil {
			return s.err
		}
		if s.st == stString && s.esc == 0 {
			// Most of a body is string contents: take a run of plain bytes at once.
			j := i
			for j < len(p) && p[j] != '"' && p[j] != '\\' && p[j] >= 0x20 {
				if (p[j] >= 0x80 || s.u8.need > 0) && !s.u8.feed(p[j]) {
					s.n += int64(j - i)
					s.fail("request body is not UTF-8 (byte %d: %#x); JSON is UTF-8, and decoders differ on what else means", s.n+1, p[j])
					return s.err
				}
				j++
			}
			if j > i {
				s.keepRun(p[i:j])
				s.n += int64(j - i)
				if i = j; i == len(p) {
					break
				}
			}
		}
		s.n++
		s.step(p[i])
	}
	return s.err
}

func (s *bodyScanner) keepRun(b []byte) {
	if room := keepString - len(s.str); room < len(b) {
		b = b[:max(room, 0)]
		s.strLong = true
	}
	s.str = append(s.str, b...)
}

func (s *bodyScanner) step(c byte) {
	switch s.st {
	case stString:
		s.stringByte(c)
		return
	case stLiteral:
		if isLiteralByte(c) {
			if len(s.lit) > 64 {
				s.malformed(c)
				return
			}
			s.lit = append(s.lit, c)
			return
		}
		if !validLiteral(s.lit) {
			s.fail("request body is not well-formed JSON: %q is not a JSON literal", string(s.lit))
			return
		}
		s.recordToolValue("l:" + string(s.lit))
		s.valueDone()
		s.step(c)
		return
	}
	if isSpace(c) {
		return
	}
	switch s.st {
	case stValue:
		s.beginValue(c)
	case stKeyOrClose, stKey:
		switch {
		case c == '"':
			s.st, s.isKey, s.str, s.strLong = stString, true, s.str[:0], false
		case c == '}' && s.st == stKeyOrClose:
			s.closeFrame()
		default:
			s.malformed(c)
		}
	case stColon:
		if c != ':' {
			s.malformed(c)
			return
		}
		s.st = stValue
	case stCommaOrClose:
		top := s.stack[len(s.stack)-1]
		switch {
		case c == ',' && top.obj:
			s.st = stKey
		case c == ',':
			s.st = stValue
		case c == '}' && top.obj, c == ']' && !top.obj:
			s.closeFrame()
		default:
			s.malformed(c)
		}
	case stDone:
		s.malformed(c)
	}
}

func (s *bodyScanner) beginValue(c byte) {
	opened := s.prevOpen
	s.prevOpen = false
	switch {
	case c == '{' || c == '[':
		if c == '{' && len(s.stack) == 1 && s.stack[0].obj && s.stack[0].key == "prompt" {
			// OpenAI's reusable prompt reference: the stored prompt can carry tools
			// (web search, MCP) the body never shows. A string "prompt" (completions) is text.
			s.fail("request field \"prompt\" refers to a stored prompt, whose tools the broker cannot see; refused")
			return
		}
		if len(s.stack) >= maxDepth {
			s.fail("request body nests deeper than %d", maxDepth)
			return
		}
		s.recordToolValue("c")
		f := jsonFrame{obj: c == '{'}
		if c == '{' && len(s.stack) == 2 && s.stack[0].obj && s.stack[0].key == "tools" && !s.stack[1].obj {
			f.tool = &toolDecl{vals: map[string]string{}}
		}
		s.stack = append(s.stack, f)
		if c == '{' {
			s.st = stKeyOrClose
		} else {
			s.st, s.prevOpen = stValue, true
		}
	case c == ']' && opened:
		s.closeFrame()
	case c == '"':
		s.st, s.isKey, s.str, s.strLong = stString, false, s.str[:0], false
	case isLiteralByte(c):
		s.st, s.lit = stLiteral, append(s.lit[:0], c)
	default:
		s.malformed(c)
	}
}

func isLiteralByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '-' || c == '+' || c == '.' || c == 'E'
}

var numberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

func validLiteral(b []byte) bool {
	switch string(b) {
	case "true", "false", "null":
		return true
	}
	return numberRE.Match(b)
}

func (s *bodyScanner) stringByte(c byte) {
	if s.esc == 0 && (c >= 0x80 || s.u8.need > 0) && !s.u8.feed(c) {
		s.fail("request body is not UTF-8 (byte %d: %#x); JSON is UTF-8, and decoders differ on what else means", s.n, c)
		return
	}
	switch {
	case s.esc == 1:
		s.esc = 0
		switch c {
		case '"', '\\', '/':
			s.keep(c)
		case 'b':
			s.keep('\b')
		case 'f':
			s.keep('\f')
		case 'n':
			s.keep('\n')
		case 'r':
			s.keep('\r')
		case 't':
			s.keep('\t')
		case 'u':
			s.esc, s.lit = 2, s.lit[:0]
		default:
			s.malformed(c)
		}
	case s.esc >= 2:
		d, ok := unhex(c)
		if !ok {
			s.malformed(c)
			return
		}
		s.lit = append(s.lit, d)
		s.esc++
		if s.esc == 6 {
			s.esc = 0
			r := rune(s.lit[0])<<12 | rune(s.lit[1])<<8 | rune(s.lit[2])<<4 | rune(s.lit[3])
			// A surrogate half is kept as U+FFFD: what matters here is that it is not
			// an ASCII letter a key or scheme could be spelled with.
			if !utf8.ValidRune(r) {
				r = utf8.RuneError
			}
			var b [4]byte
			for _, x := range b[:utf8.EncodeRune(b[:], r)] {
				s.keep(x)
			}
		}
	case c == '\\':
		s.esc = 1
	case c == '"':
		s.stringDone()
	case c < 0x20:
		s.malformed(c)
	default:
		s.keep(c)
	}
}

func (s *bodyScanner) keep(c byte) {
	if len(s.str) < keepString {
		s.str = append(s.str, c)
	} else {
		s.strLong = true
	}
}

func (s *bodyScanner) stringDone() {
	v := string(s.str)
	if s.isKey {
		top := &s.stack[len(s.stack)-1]
		top.key, top.keyLong = foldKey(v), s.strLong
		s.st = stColon
		if top.tool != nil {
			if _, dup := top.tool.vals[top.key]; dup || top.keyLong {
				s.fail("tools[] entry repeats key %q (in some spelling a decoder folds to it); refused: decoders differ on which one counts", capText(v, 128))
				return
			}
			if len(top.tool.vals) >= maxToolKeys {
				s.fail("tools[] entry has more than %d keys; refused", maxToolKeys)
				return
			}
			top.tool.vals[top.key] = ""
			if v != top.key && top.tool.bent == "" {
				top.tool.bent = v
			}
		}
		if len(s.stack) == 1 {
			if why, ok := rootKeysRefused[top.key]; ok {
				s.fail("request field %q asks for %s: the upstream would act for the jail beyond the model call (past its firewall, or with its own endpoint or key); refused", v, why)
			}
		}
		return
	}
	s.checkString(v, s.strLong)
	if s.strLong {
		s.recordToolValue("c") // too long to be any value the policy allows
	} else {
		s.recordToolValue("s:" + v)
	}
	s.valueDone()
}

func (s *bodyScanner) valueDone() {
	s.prevOpen = false
	if len(s.stack) == 0 {
		s.st = stDone
		return
	}
	s.st = stCommaOrClose
}

func (s *bodyScanner) closeFrame() {
	if t := s.stack[len(s.stack)-1].tool; t != nil {
		if err := checkServerTool(t); err != nil {
			s.fail("%s", err.Error())
			return
		}
	}
	s.stack = s.stack[:len(s.stack)-1]
	s.valueDone()
}

// finish reports whether the whole body was one complete JSON value.
func (s *bodyScanner) finish() error {
	if s.err != nil {
		return s.err
	}
	if s.st == stLiteral {
		if !validLiteral(s.lit) {
			return s.fail("request body is not well-formed JSON: %q is not a JSON literal", string(s.lit))
		}
		s.valueDone()
	}
	if s.st != stDone {
		return s.fail("request body ends before its JSON value does")
	}
	return nil
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

// capText cuts s to at most n bytes (at a UTF-8 boundary) and says how much was cut, as
// the broker cuts the fields of its audit lines: a refusal may quote the client's bytes.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…[" + strconv.Itoa(len(s)-cut) + " more bytes]"
}
