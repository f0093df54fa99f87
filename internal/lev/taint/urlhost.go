package taint

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// urlShaped says whether a client handed s as a destination would take the whole value
// for a URL, reading it as WHATWG's parser (Node, browsers) does: leading spaces and
// control characters trimmed and tabs and newlines ignored anywhere, a scheme followed by
// "://" (or, for WHATWG's special schemes http, https, ws, wss, ftp and file, by ":"
// alone: "https:evil.test" is https://evil.test/), then something other than whitespace.
// Text that merely contains a link ("see https://…") does not start with a scheme, so a
// file's content is not taken for a destination. Whitespace later in the value does not
// make it text: Node percent-encodes a space in a URL's path, so "https://evil.test/ x"
// still goes to evil.test. It reads only as far as the scheme and the slashes.
func urlShaped(s string) bool {
	// Leading C0 and spaces, as WHATWG strips them, and every leading Unicode space or
	// invisible formatting character: Python's requests lstrip()s the URL (U+00A0 and
	// U+3000 included) before it parses it.
	s = strings.TrimLeftFunc(s, func(r rune) bool { return r <= ' ' || unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) })
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	var lower [6]byte // the scheme, lower-cased, as far as a special scheme goes (and one more)
	n := 0
	for ; ; i++ {
		skip()
		if i >= len(s) {
			return false
		}
		c := s[i]
		if c == ':' {
			break
		}
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (n == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
		if n < len(lower) {
			lower[n] = c | 0x20 // ASCII lower case for letters; digits and + - . are not compared
		}
		n++
	}
	if n == 0 {
		return false
	}
	i++ // the colon
	slashes := 0
	for slashes < 2 {
		skip()
		if i >= len(s) || s[i] != '/' {
			break
		}
		slashes++
		i++
	}
	if slashes < 2 && (n >= len(lower) || !specialSchemes[string(lower[:n])]) {
		return false
	}
	skip()
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return !unicode.IsSpace(r)
}

// specialSchemes are WHATWG's special schemes, which Node reads as a URL with a host even
// without the slashes ("https:evil.test" is https://evil.test/).
var specialSchemes = map[string]bool{"http": true, "https": true, "ws": true, "wss": true, "ftp": true, "file": true}

// hostOf reads a URL's host (canonicalHost: every spelling of one address or name comes
// out the same, without port, userinfo or trailing dot) the way every client agrees on, or
// says why it cannot. Parsers differ on exactly the inputs
// refused here: WHATWG URL (Node, browsers) reads a backslash as a slash and strips tabs
// and newlines anywhere, Python's urlsplit strips some of them, Go refuses control
// characters; so `https://evil.test\@x.example.com` is evil.test to
// Node and x.example.com to Go. Spellings clients agree on once decoded (percent-encoding,
// IDNA, numeric IPv4 forms such as 0x7f.1) are canonicalised, not left unclear: a deny
// rule on the canonical address must catch them all.
func hostOf(raw string) (host, unclear string) {
	if raw == "" {
		return "", ""
	}
	if why := junk(raw); why != "" {
		return raw, "its url " + why
	}
	at, end, ok := hostSpan(raw)
	if !ok {
		return raw, "its url is not an absolute http(s) URL"
	}
	hostPart := raw[at:end]
	u, err := url.Parse(raw)
	if err != nil && strings.Contains(hostPart, "%") && !strings.HasPrefix(hostPart, "[") {
		// Go refuses some percent-encoded hosts that WHATWG clients decode and reach
		// (evil%2etest): check the rest of the URL with a stand-in host, and read the host
		// itself below.
		u, err = url.Parse(raw[:at] + "host.invalid" + raw[end:])
	}
	if err != nil {
		return raw, "its url does not parse"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return raw, "its url is not an absolute http(s) URL"
	}
	if u.Host == "" || hostPart == "" {
		return raw, "its url has no host"
	}
	// Go's u.Hostname() has already decoded the host; canonicalHost decodes it from the
	// text as written, with every other spelling.
	h, why := canonicalHost(hostPart)
	if why != "" {
		return raw, why
	}
	return h, ""
}

// plainHost reads a host argument (or `lev policy test --target` for a web tool): a host
// name or IP address, with an optional port, and nothing a client could take for a path,
// userinfo or another host.
func plainHost(v string) (host, unclear string) {
	if v == "" {
		return "", ""
	}
	if why := junk(v); why != "" {
		return v, "its host argument " + why
	}
	if strings.ContainsAny(v, "/?#@") {
		return v, "its host argument is not a plain host name"
	}
	h, why := hostOf("http://" + v)
	if why != "" {
		return v, "its host argument is not a plain host name"
	}
	return h, ""
}

// numeric: a label WHATWG's host parser reads as a number (decimal, or 0x hex), which
// makes the whole host an IPv4 address.
func numeric(label string) bool {
	s := label
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		s = s[2:]
		if s == "" {
			return true
		}
		return strings.Trim(s, "0123456789abcdefABCDEF") == ""
	}
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// junk says why s holds a character that parsers treat differently or that hides what the
// person approving would read: control characters, whitespace, a backslash, invisible
// formatting characters (bidirectional overrides, zero-width).
func junk(s string) string {
	if why := controls(s); why != "" {
		return why
	}
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			return "contains whitespace"
		case r == '\\':
			return "contains a backslash"
		}
	}
	return ""
}

// controls says why s holds a control or invisible formatting character.
func controls(s string) string {
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return "contains a control character"
		case unicode.Is(unicode.Cf, r):
			return "contains an invisible formatting character"
		}
	}
	return ""
}

// display is an argument value as the audit shows it.
func display(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
