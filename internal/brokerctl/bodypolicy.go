package brokerctl

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// A model-call route is not only a model call: the request body can make the upstream
// itself reach out to the network on the jail's behalf — a server tool (Anthropic's
// web_fetch, web_search, code execution; OpenAI's web_search, mcp, file_search), an MCP
// server the upstream connects to (mcp_servers), or an image or document "source" given
// as a URL the upstream downloads. Each is an egress channel past LEVER_EGRESS: the jail
// names any URL and the upstream fetches it, carrying whatever the jail put in it. The
// broker therefore reads every request body below /llm/ as it streams through and refuses
// (403, audited) a body that asks for any of these. The body is scanned as it passes:
// each chunk read from the jail is scanned before any byte of it goes on, and whatever
// the policy refuses comes before the end of the JSON value, so a refused body never
// reaches the upstream complete and is never acted on. The last byte is also held back
// until the end has been read and found clean (belt and braces: a body refused only at
// its end is one the upstream could not parse either).

// bodyPolicyError is a body the broker refuses; its text names what was found.
type bodyPolicyError struct{ msg string }

func (e *bodyPolicyError) Error() string { return e.msg }

// rootKeysRefused are top-level request fields that make the upstream connect out.
var rootKeysRefused = map[string]string{
	"mcp_servers":        "MCP servers the upstream would connect to",
	"web_search_options": "a web search the upstream would run",
	// OpenAI-compatible gateways: OpenRouter's plugins run a web search with the prompt
	// ("web") or fetch and parse files ("file-parser") on the upstream's side.
	"plugins": "upstream plugins (a gateway's web search or file fetching)",
	// Gateways that take credentials and endpoints from the body (LiteLLM's client-side
	// credentials api_key/api_base/base_url and user_config, Keywords AI's
	// customer_credentials): with api_base alone, LiteLLM sends its configured key to the
	// URL the jail named.
	"api_key":              "a credential of the jail's own",
	"api_base":             "an upstream endpoint of the jail's choosing",
	"base_url":             "an upstream endpoint of the jail's choosing",
	"user_config":          "a gateway routing config (endpoints and keys) of the jail's choosing",
	"customer_credentials": "a credential of the jail's own",
}

// fetchKeys hold (as a string, or as an object's "url") what the upstream downloads:
// OpenAI's image_url / file_url / server_url and the like; Anthropic's image and document
// "source": {"type": "url", "url": ...} is matched by its parent key. A "url" elsewhere
// (a tool call's arguments in the history, say) is data, not a fetch.
//
// OpenAI-compatible gateways also fetch a URL given where OpenAI takes inline data or an
// id: OpenRouter reads a PDF from a URL in "file_data", LiteLLM-style gateways from one in
// "file_id". Real ids and inline data ("file-abc...", base64, a data: URL) have no ':'
// outside data:, so they pass the same check.
var fetchKeys = map[string]bool{"image_url": true, "file_url": true, "server_url": true, "document_url": true, "audio_url": true, "video_url": true, "file_data": true, "file_id": true}

// clientToolTypes are tool types the client (lev, in the jail) executes itself; any other
// declared type is a server tool the upstream runs.
var clientToolTypes = map[string]bool{"function": true, "custom": true, "local_shell": true, "computer_use_preview": true}

// clientToolRE: Anthropic's client-executed tool types, versioned by date.
var clientToolRE = regexp.MustCompile(`^(bash|text_editor|computer|memory)_[0-9]{8}$`)

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

// The one server tool the policy lets through, per provider, in exactly the form lev
// declares it (provider.AnthropicWebSearchTool, provider.OpenAIWebSearchTool): a web
// search the upstream runs with its own search index. A search sends the query to the
// provider's search backend, not to a host the jail names; it fetches no URL the jail
// gives (Anthropic's web_search has no URL input; OpenAI's runs with external_web_access
// false, from its index and cache only, never a live fetch). Every other server tool, and
// these with any other key or value (allowed_domains, user_location, a second "type"...),
// is refused as before.
const (
	anthropicWebSearch = "web_search_20250305"
	openaiWebSearch    = "web_search"
	// maxSearchUses bounds max_uses in the Anthropic form.
	maxSearchUses = 10
	// maxToolKeys bounds the keys one tools[] element may have (lev's have at most five):
	// the scanner keeps them until the element closes.
	maxToolKeys = 64
)

// toolDecl is one tools[] element as the scanner read it.
type toolDecl struct {
	typ string // an allowed server tool's type, once seen ("" otherwise)
	// bent is the first key not spelled in plain lower case: the policy folds keys as
	// the most lenient decoder does, but a case-sensitive upstream would not see
	// "External_Web_Access" as the field that turns live fetching off.
	bent string
	vals map[string]string // folded key -> "s:"+string, "l:"+literal, or "c" (object/array)
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
		s.err = &bodyPolicyError{msg: fmt.Sprintf(format, args...)}
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

// recordToolValue notes a value of a tools[] element's key (what a server tool's check at
// the element's close reads).
func (s *bodyScanner) recordToolValue(v string) {
	if n := len(s.stack); n == 3 {
		if t := s.stack[2].tool; t != nil {
			t.vals[s.stack[2].key] = v
		}
	}
}

// checkServerTool judges a closed tools[] element that declared an allowed server tool:
// exactly lev's form, nothing more.
func checkServerTool(t *toolDecl) error {
	var want map[string]func(string) bool
	switch t.typ {
	case "":
		return nil
	}
	if t.bent != "" {
		return &bodyPolicyError{msg: fmt.Sprintf("server tool %q with key %q: keys must be spelled as lev spells them (lower case); refused", t.typ, capText(t.bent, 128))}
	}
	switch t.typ {
	case anthropicWebSearch:
		want = map[string]func(string) bool{
			"type": func(string) bool { return true },
			"name": func(v string) bool { return v == "s:web_search" },
			"max_uses": func(v string) bool {
				n := strings.TrimPrefix(v, "l:")
				return n != v && len(n) <= 2 && numberRE.MatchString(n) && !strings.ContainsAny(n, ".eE-") && n != "0" && atoiSmall(n) <= maxSearchUses
			},
		}
		if _, ok := t.vals["name"]; !ok {
			return &bodyPolicyError{msg: fmt.Sprintf("server tool %q without \"name\": \"web_search\"; refused", t.typ)}
		}
	case openaiWebSearch:
		want = map[string]func(string) bool{
			"type":                func(string) bool { return true },
			"external_web_access": func(v string) bool { return v == "l:false" },
		}
		if _, ok := t.vals["external_web_access"]; !ok {
			return &bodyPolicyError{msg: fmt.Sprintf("server tool %q is allowed only with \"external_web_access\": false (search from the upstream's index, no live fetch of a URL the jail names); refused", t.typ)}
		}
	}
	for k, v := range t.vals {
		ok, known := want[k]
		if !known {
			return &bodyPolicyError{msg: fmt.Sprintf("server tool %q with key %q: only lev's own form of the web search tool is allowed (no other keys); refused", t.typ, capText(k, 128))}
		}
		if !ok(v) {
			return &bodyPolicyError{msg: fmt.Sprintf("server tool %q with %q = %s: not the value lev sends; refused", t.typ, k, capText(strings.TrimPrefix(strings.TrimPrefix(v, "s:"), "l:"), 128))}
		}
	}
	return nil
}

func atoiSmall(n string) int {
	v := 0
	for _, c := range n {
		v = v*10 + int(c-'0')
	}
	return v
}

// foldKey is the form object keys are compared in. Lower case is not enough: a Go
// upstream's encoding/json matches keys to fields by Unicode simple folding, where U+017F
// (ſ) is 's' and U+212A (the Kelvin sign) is 'k', so "toolſ" fills its Tools field. Each
// rune becomes the smallest rune of its folding orbit, lower-cased: every spelling such a
// decoder takes for a key folds to the one plain lower-case ASCII form the policy names.
func foldKey(k string) string {
	ascii := true
	for i := 0; i < len(k); i++ {
		if k[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(k)
	}
	var b strings.Builder
	for _, r := range k {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(unicode.ToLower(least))
	}
	return b.String()
}

// checkString applies the policy to a string value in its place.
func (s *bodyScanner) checkString(v string, long bool) {
	top := s.stack
	if len(top) == 0 {
		return
	}
	f := top[len(top)-1]
	if !f.obj || f.keyLong {
		return
	}
	parent := ""
	if len(top) >= 2 && top[len(top)-2].obj {
		parent = top[len(top)-2].key
	}
	if fetchKeys[f.key] || f.key == "url" && fetchKeys[parent] || f.key == "url" && parent == "source" {
		t := strings.ToLower(strings.TrimLeft(v, " \t\r\n\f\v\b"))
		if !strings.HasPrefix(t, "data:") && (long || strings.Contains(t, ":") || strings.HasPrefix(t, "//") || strings.HasPrefix(t, `\\`)) {
			s.fail("request field %q holds %q: the upstream would fetch it, an egress channel past the jail's firewall; send the content inline (base64 or data: URL)", f.key, capText(v, 128))
		}
		return
	}
	// {"tools": [ {"type": ...}, ... ]} at the top level.
	if f.key == "type" && len(top) == 3 && top[0].obj && top[0].key == "tools" && !top[1].obj {
		if f.tool != nil && (v == anthropicWebSearch || v == openaiWebSearch) && !long {
			if s.serverTools++; s.serverTools > 1 {
				s.fail("more than one server tool declared (%q again); lev declares its web search once; refused", v)
				return
			}
			f.tool.typ = v
			return
		}
		if !clientToolTypes[v] && !clientToolRE.MatchString(v) {
			s.fail("tool type %q is a server tool the upstream runs (it can reach the network on the jail's behalf); only tools the client executes (function, custom, ...) are allowed", capText(v, 128))
		}
	}
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

// policyBody passes the request body to the upstream while the scanner reads it: a chunk
// goes on only once scanned, and the last byte only once the end was found clean.
type policyBody struct {
	src     io.Reader
	sc      bodyScanner
	buf     []byte
	q       []byte // read, scanned, not yet passed on
	srcDone bool
	err     error                           // the policy's refusal, once found
	refused atomic.Pointer[bodyPolicyError] // the same, for the handler (the transport reads in its own goroutine)
	readErr error                           // the source's own error (not the policy's)
}

func newPolicyBody(src io.Reader) *policyBody {
	return &policyBody{src: src, buf: make([]byte, 32<<10)}
}

func (b *policyBody) Read(p []byte) (int, error) {
	for {
		if b.err != nil {
			return 0, b.err
		}
		if b.readErr != nil {
			return 0, b.readErr
		}
		// Pass on everything but the last byte held; all of it once the end was clean.
		avail := len(b.q) - 1
		if b.srcDone {
			avail = len(b.q)
		}
		if avail > 0 {
			n := copy(p, b.q[:avail])
			b.q = b.q[n:]
			return n, nil
		}
		if b.srcDone {
			return 0, io.EOF
		}
		n, err := b.src.Read(b.buf)
		if n > 0 {
			if perr := b.sc.write(b.buf[:n]); perr != nil {
				b.setErr(perr)
				continue
			}
			b.q = append(b.q, b.buf[:n]...)
		}
		switch {
		case errors.Is(err, io.EOF):
			if perr := b.sc.finish(); perr != nil {
				b.setErr(perr)
				continue
			}
			b.srcDone = true
		case err != nil:
			b.readErr = err
		}
	}
}

func (b *policyBody) setErr(err error) {
	b.err = err
	var pe *bodyPolicyError
	if errors.As(err, &pe) {
		b.refused.Store(pe)
	}
}

// refusal is the policy's refusal, if any (nil-safe).
func (b *policyBody) refusal() error {
	if b == nil {
		return nil
	}
	if pe := b.refused.Load(); pe != nil {
		return pe
	}
	return nil
}
