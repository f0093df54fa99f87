package taint

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// targetKeys are the arguments a tool lev does not know (an MCP or script tool) may name
// its target by, in the order they were looked up before a call could name several.
var targetKeys = []string{"url", "target", "host", "command", "path"}

// Target extracts what a policy matches an outbound call against: the URL's host for the
// web and HTTP tools, the command line for shell, the query for web_search, "result" for
// submit_output. For a tool lev does not know it is read from the one argument among url
// (its host), target, host, command and path (names compared case-insensitively) the call
// carries; when it carries none, from the one URL among its arguments (its host); else "".
//
// unclear is non-empty when lev cannot read the target unambiguously: a url that is not a
// clean absolute http(s) URL, a host that is not a plain host name, a call naming its
// target by more than one of those arguments, or one carrying a URL to another host in
// any other argument, however deeply nested (otherTarget). The client that acts on the call (a Node or
// Python MCP server, say) may then reach another host than the one lev would read, so the
// target is returned as the raw text (for the audit, the person asked and the key of a
// session answer) and the policy must not match a target-scoped entry against it. The
// gate receives both in live runs exactly as `lev policy test` derives them from its
// command line (GivenTarget).
func Target(tool string, args map[string]any) (target, unclear string) {
	str := func(k string) string {
		if v, ok := args[k].(string); ok {
			return v
		}
		return ""
	}
	switch tool {
	case "web_fetch", "http_get", "http_post":
		return hostOf(str("url"))
	case "web_search":
		return str("query"), ""
	case "shell":
		if c := str("command"); c != "" {
			return c, ""
		}
		if a, ok := args["argv"].([]any); ok {
			parts := make([]string, 0, len(a))
			for _, p := range a {
				parts = append(parts, fmt.Sprint(p))
			}
			return strings.Join(parts, " "), ""
		}
		return "", ""
	case "submit_output":
		return "result", ""
	}
	return otherTarget(args)
}

// targetRank is each of targetKeys by its place in that list (built once: otherTarget
// runs for every call of a tool lev does not know).
var targetRank = func() map[string]int {
	m := map[string]int{}
	for i, k := range targetKeys {
		m[k] = i
	}
	return m
}()

// otherTarget reads the target of a tool lev does not know. lev cannot tell which of its
// arguments the server acts on, so a call that names a target in two ways (url and host,
// Url and target) has no target lev could vouch for: a rule for one of them would let the
// call through to the other. For the same reason a URL anywhere else in the arguments
// (an endpoint, uri or webhook argument, a nested {"request": {"url": …}}) makes the
// target unclear unless it goes to the target's own host: a server whose destination
// argument has another name would otherwise be matched by the entry for its path or
// channel. A call naming no target but carrying exactly one URL, which reads clean, has
// that URL's host as its target.
func otherTarget(args map[string]any) (target, unclear string) {
	rank := targetRank
	var found []string
	for k := range args {
		if _, ok := rank[strings.ToLower(k)]; ok {
			found = append(found, k)
		}
	}
	sort.Slice(found, func(i, j int) bool { return rank[strings.ToLower(found[i])] < rank[strings.ToLower(found[j])] })
	urls, short := urlsIn(args)
	switch len(found) {
	case 0:
		return urlTarget(urls, short)
	case 1:
	default:
		parts := make([]string, 0, len(found))
		for _, k := range found {
			parts = append(parts, k+"="+display(args[k]))
		}
		return strings.Join(parts, " "), fmt.Sprintf("the call names its target by %d arguments (%s), and the server may act on any of them", len(found), strings.Join(found, ", "))
	}
	k := found[0]
	target, unclear = namedTarget(k, args[k])
	if unclear != "" {
		return target, unclear
	}
	if short != "" {
		// The raw text differs from the clear target's, so an earlier "allow for session"
		// answer for the clear target does not cover a call lev could not read whole.
		return k + "=" + display(args[k]) + " (" + short + ")", "its arguments " + short + ", so lev cannot tell whether another of them is a URL the server may send to"
	}
	hostTarget := false
	switch strings.ToLower(k) {
	case "url", "host", "target":
		hostTarget = true
	}
	var others []foundURL
	for _, u := range urls {
		if u.top == k {
			continue // the value the target was read from
		}
		if h, why := hostOf(u.raw); hostTarget && why == "" && h == strings.TrimSuffix(strings.ToLower(target), ".") {
			continue // another URL to the target's own host: a referer, a callback on it
		}
		others = append(others, u)
	}
	if len(others) == 0 {
		return target, ""
	}
	// The raw text names the URLs too: it is the key of a session answer, which must not
	// cover the same path or channel sent with another URL.
	parts := []string{k + "=" + display(args[k])}
	names := make([]string, 0, len(others))
	for _, u := range others {
		parts = append(parts, u.label()+"="+u.raw)
		names = append(names, u.label())
	}
	if len(others) == 1 {
		return strings.Join(parts, " "), others[0].what() + " is a URL too, and the server may send to it"
	}
	return strings.Join(parts, " "), fmt.Sprintf("%d more of its arguments are URLs (%s), and the server may send to any of them", len(others), strings.Join(names, ", "))
}

// namedTarget reads the target from the one target argument k a call carries.
func namedTarget(k string, val any) (target, unclear string) {
	v, ok := val.(string)
	if !ok {
		return display(val), fmt.Sprintf("its %s argument is not a string", k)
	}
	switch strings.ToLower(k) {
	case "url":
		return hostOf(v)
	case "host":
		return plainHost(v)
	case "target":
		if strings.Contains(v, "://") {
			return hostOf(v)
		}
		if why := junk(v); why != "" {
			return v, "its target argument " + why
		}
		// URL syntax without a scheme ("evil.test/x.example.com", "evil.test#.example.com",
		// "user@evil.test"): a server that puts "https://" in front sends it to the host
		// before the first of these, while a pattern like *.example.com matches the whole.
		if strings.ContainsAny(v, "/@#?:\\") {
			return v, "its target argument has a URL's punctuation (/ @ # ? : \\) but no scheme, so a server could read another host from it than a pattern matches"
		}
	case "path":
		if why := controls(v); why != "" {
			return v, "its path argument " + why
		}
	}
	return v, ""
}

// urlTarget is the target of a call naming none of the target arguments: the host of the
// one URL it carries, if that URL reads clean; with several URLs, or one lev cannot read,
// lev does not know where the server sends, so the target is unclear.
func urlTarget(urls []foundURL, short string) (target, unclear string) {
	switch {
	case short != "":
		// Not "": the empty target's session answer (every call naming none) must not
		// cover a call lev could not read whole.
		return "(" + short + ")", "its arguments " + short + ", so lev cannot tell whether one of them is a URL the server may send to"
	case len(urls) == 0:
		return "", ""
	case len(urls) == 1:
		u := urls[0]
		h, why := hostOf(u.raw)
		if why == "" {
			return h, ""
		}
		return u.raw, fmt.Sprintf("%s is a URL lev cannot read as one destination (%s)", u.what(), why)
	}
	parts := make([]string, 0, len(urls))
	names := make([]string, 0, len(urls))
	for _, u := range urls {
		parts = append(parts, u.label()+"="+u.raw)
		names = append(names, u.label())
	}
	return strings.Join(parts, " "), fmt.Sprintf("the call names no target but carries %d URLs (%s), and the server may send to any of them", len(urls), strings.Join(names, ", "))
}

// Bounds of the walk through a call's arguments in search of URLs. Arguments nested
// deeper, or holding more values, are not read whole, and the target is then unclear (a
// URL could hide past the bound). strictjson refuses nesting past 200 levels anyway; a
// server's ordinary arguments stay far below both.
const (
	maxURLWalkDepth  = 64
	maxURLWalkValues = 1 << 16
)

// foundURL is a string in a call's arguments that a client would take for a URL: where it
// is (name: "endpoint", "request.url", "urls[1]"; for an object key, the object holding
// it, "" for an argument's own name), the top-level argument holding it, and its text as
// given.
type foundURL struct {
	name, top, raw string
	key            bool
}

// what names the URL's place for a reason: "its endpoint argument".
func (u foundURL) what() string {
	switch {
	case !u.key:
		return "its " + u.name + " argument"
	case u.name == "":
		return "an argument's name"
	}
	return "a key of its " + u.name + " argument"
}

// label names the URL's place in the raw text of an unclear target: "endpoint".
func (u foundURL) label() string {
	switch {
	case !u.key:
		return u.name
	case u.name == "":
		return "(name)"
	}
	return u.name + "(key)"
}

// urlsIn finds every URL-shaped string (urlShaped) in args, values and object keys alike,
// walking nested objects and arrays in key order. short is non-empty, saying why, when the
// walk stopped at one of its bounds. It runs for every call of a tool lev does not know, a
// file's whole content among its values, so it copies nothing but what it finds.
func urlsIn(args map[string]any) (urls []foundURL, short string) {
	var w urlWalk
	keys := sortedKeys(args)
	for _, k := range keys {
		if urlShaped(k) {
			w.urls = append(w.urls, foundURL{top: k, raw: k, key: true})
		}
		w.path = append(w.path[:0], pathStep{key: k})
		if !w.walk(args[k], k, 1) {
			break
		}
	}
	return w.urls, w.short
}

// pathStep is one step from an argument to a nested value: an object key or an array index.
type pathStep struct {
	key   string
	index int
	array bool
}

// urlWalk is urlsIn's state: the path to the value at hand (named only for a value that is
// a URL), the values seen against the bound, what it found.
type urlWalk struct {
	path  []pathStep
	seen  int
	urls  []foundURL
	short string
}

func (w *urlWalk) name() string {
	var b strings.Builder
	for i, st := range w.path {
		switch {
		case st.array:
			fmt.Fprintf(&b, "[%d]", st.index)
		case i > 0:
			b.WriteString("." + st.key)
		default:
			b.WriteString(st.key)
		}
	}
	return b.String()
}

func (w *urlWalk) walk(v any, top string, depth int) bool {
	w.seen++
	if w.seen > maxURLWalkValues {
		w.short = fmt.Sprintf("hold more than %d values", maxURLWalkValues)
		return false
	}
	if depth > maxURLWalkDepth {
		w.short = fmt.Sprintf("nest deeper than %d levels", maxURLWalkDepth)
		return false
	}
	switch v := v.(type) {
	case string:
		if urlShaped(v) {
			w.urls = append(w.urls, foundURL{name: w.name(), top: top, raw: v})
		}
	case map[string]any:
		for _, k := range sortedKeys(v) {
			if urlShaped(k) {
				// A server may take an object's keys for destinations too (a map of URLs
				// to what to send each).
				w.urls = append(w.urls, foundURL{name: w.name(), top: top, raw: k, key: true})
			}
			w.path = append(w.path, pathStep{key: k})
			ok := w.walk(v[k], top, depth+1)
			w.path = w.path[:len(w.path)-1]
			if !ok {
				return false
			}
		}
	case []any:
		for i, e := range v {
			w.path = append(w.path, pathStep{index: i, array: true})
			ok := w.walk(e, top, depth+1)
			w.path = w.path[:len(w.path)-1]
			if !ok {
				return false
			}
		}
	}
	return true
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

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
	i := 0
	for i < len(s) && s[i] <= ' ' {
		i++
	}
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

// GivenTarget is the target of `lev policy test TOOL --target T`, derived as the live gate
// derives it: for a tool whose target is a URL's host (the web and HTTP tools, any tool lev
// does not know), a T written as a URL is read as a url argument is, so a dry run of an
// unclear URL reports what the live gate does with it.
//
// A plain T for the web and HTTP tools is read as a host, as the live gate would read it
// from a URL (lower-cased, without port), so `--target API.example.com` is what a call to
// https://API.example.com/ is. For other tools a plain T may be a path, a command line or a
// channel: it is taken as written. A T a client would take for a URL without "://"
// (urlShaped: "https:evil.test") is read as a URL too, as the live gate reads such a value
// in any argument of a tool it does not know.
func GivenTarget(tool, t string) (target, unclear string) {
	hostTargeted := false
	switch tool {
	case "web_fetch", "http_get", "http_post":
		hostTargeted = true
	default:
		if _, known := builtin[tool]; known {
			return t, ""
		}
	}
	switch {
	case strings.Contains(t, "://") || urlShaped(t):
		return hostOf(t)
	case hostTargeted:
		return plainHost(t)
	}
	return t, ""
}

// hostOf reads a URL's host (lower-cased, without port, userinfo or trailing dot) the way
// every client agrees on, or says why it cannot. Parsers differ on exactly the inputs
// refused here: WHATWG URL (Node, browsers) reads a backslash as a slash and strips tabs
// and newlines anywhere, Python's urlsplit strips some of them, Go refuses control
// characters; so `https://evil.test\@x.example.com` is evil.test to
// Node and x.example.com to Go. A percent-encoded or non-ASCII host is mapped (IDNA,
// decoding) differently by each, and a numeric host such as 0x7f.1 is an IPv4 address to
// WHATWG and a name to Go.
func hostOf(raw string) (host, unclear string) {
	if raw == "" {
		return "", ""
	}
	if why := junk(raw); why != "" {
		return raw, "its url " + why
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw, "its url does not parse"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return raw, "its url is not an absolute http(s) URL"
	}
	if u.Host == "" {
		return raw, "its url has no host"
	}
	authority, _, _ := strings.Cut(raw[strings.Index(raw, "://")+3:], "/")
	authority, _, _ = strings.Cut(authority, "?")
	authority, _, _ = strings.Cut(authority, "#")
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		authority = authority[at+1:]
	}
	if strings.Contains(authority, "%") {
		return raw, "its url percent-encodes its host"
	}
	h := u.Hostname()
	for _, r := range h {
		if r > unicode.MaxASCII {
			return raw, "its url's host is not plain ASCII (clients map such names differently)"
		}
	}
	if ip := net.ParseIP(h); ip != nil {
		return ip.String(), ""
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" {
		return raw, "its url has no host"
	}
	labels := strings.Split(h, ".")
	if numeric(labels[len(labels)-1]) {
		return raw, "its url's host is an IPv4 address in a spelling clients read differently"
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
