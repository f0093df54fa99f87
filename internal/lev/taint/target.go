package taint

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"net/url"
	"sort"
	"strconv"
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
		return capUnclear(hostOf(str("url")))
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
// that URL's host as its target. A URL that ends at its host, beside other text, is
// unclear too (splitURL).
//
// The raw text of an unclear target is capped (rawText), and the walk names only the
// first few URLs it finds: a call's cost stays in proportion to its size, however many
// URLs sit under however long a name.
func otherTarget(args map[string]any) (target, unclear string) {
	rank := targetRank
	var found []string
	for k := range args {
		if _, ok := rank[strings.ToLower(k)]; ok {
			found = append(found, k)
		}
	}
	sort.Slice(found, func(i, j int) bool {
		ri, rj := rank[strings.ToLower(found[i])], rank[strings.ToLower(found[j])]
		return ri < rj || ri == rj && found[i] < found[j] // one order for url and URL: the raw text is a key
	})
	switch len(found) {
	case 0:
		return urlTarget(args)
	case 1:
	default:
		var t rawText
		for _, k := range found {
			t.field(k, display(args[k]))
		}
		return t.String(), fmt.Sprintf("the call names its target by %d arguments (%s), and the server may act on any of them", len(found), listed(found, len(found)))
	}
	k := found[0]
	target, unclear = namedTarget(k, args[k])
	if unclear != "" {
		return capRaw(target), unclear
	}
	hostTarget := false
	switch strings.ToLower(k) {
	case "url", "host", "target":
		hostTarget = true
	}
	v, _ := args[k].(string) // namedTarget read it clear: a string
	var w urlWalk
	if hostTarget && bareAuthority(v) {
		w.bareAt = "its " + k + " argument"
	}
	w.text.field(k, v)
	own := strings.TrimSuffix(strings.ToLower(target), ".")
	w.urls(args, func(top, raw string) bool {
		if top == k {
			return false // the value the target was read from
		}
		if !hostTarget {
			return true
		}
		if h, why := hostOf(raw); why == "" && h == own {
			// Another URL to the target's own host: a referer, a callback on it; one that
			// ends at the host could be joined with other text like the target's own.
			if w.bareAt == "" && bareAuthority(raw) {
				w.bareAt = w.here().what()
			}
			return false
		}
		return true
	})
	if w.short != "" {
		// The raw text differs from the clear target's, so an earlier "allow for session"
		// answer for the clear target does not cover a call lev could not read whole.
		var t rawText
		t.field(k, v)
		t.add(" (" + w.short + ")")
		return t.String(), "its arguments " + w.short + ", so lev cannot tell whether another of them is a URL the server may send to"
	}
	switch {
	case w.n == 0 && w.bareAt != "":
		return w.splitURL(args, w.bareAt, target)
	case w.n == 0:
		return target, ""
	case w.n == 1:
		// The raw text names the URLs too: it is the key of a session answer, which must
		// not cover the same path or channel sent with another URL.
		return w.text.String(), w.first[0].what() + " is a URL too, and the server may send to it"
	}
	return w.text.String(), fmt.Sprintf("%d more of its arguments are URLs (%s), and the server may send to any of them", w.n, w.labels())
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
		if why := hostPath(v); why != "" {
			return v, "its path argument " + why
		}
	}
	return v, ""
}

// hostPath says why a path argument could name a host: a server that resolves a path it
// is given as a URL (fetch(new URL(path, base)), a "read this file or URL" tool) reads
// one from a URL ("https://evil.test/x.json"), a scheme-relative path ("//evil.test/x"),
// and, as WHATWG reads a backslash as a slash, "/\\evil.test/x"; a pattern like /* or
// *.json matches each of them as text.
func hostPath(v string) string {
	switch {
	case urlShaped(v):
		return "is a URL, which a server may fetch"
	case strings.HasPrefix(strings.TrimLeftFunc(v, func(r rune) bool { return r <= ' ' || unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) }), "//"):
		return "starts with //, which a server resolving it as a URL reads as a host"
	case strings.Contains(v, "\\"):
		return "contains a backslash, which a server resolving it as a URL may read as a slash (/\\evil.test is a host)"
	}
	return ""
}

// urlTarget is the target of a call naming none of the target arguments: the host of the
// one URL it carries, if that URL reads clean; with several URLs, or one lev cannot read,
// lev does not know where the server sends, so the target is unclear.
func urlTarget(args map[string]any) (target, unclear string) {
	var w urlWalk
	w.urls(args, nil)
	switch {
	case w.short != "":
		// Not "": the empty target's session answer (every call naming none) must not
		// cover a call lev could not read whole.
		return "(" + w.short + ")", "its arguments " + w.short + ", so lev cannot tell whether one of them is a URL the server may send to"
	case w.n == 0:
		return "", ""
	case w.n == 1:
		u := w.first[0]
		h, why := hostOf(u.raw)
		if why != "" {
			return capRaw(u.raw), fmt.Sprintf("%s is a URL lev cannot read as one destination (%s)", u.what(), why)
		}
		if bareAuthority(u.raw) {
			return w.splitURL(args, u.what(), h)
		}
		return h, ""
	}
	return w.text.String(), fmt.Sprintf("the call names no target but carries %d URLs (%s), and the server may send to any of them", w.n, w.labels())
}

// bareAuthority says whether raw, a URL, ends at its host and port: nothing ("/", "?",
// "#") follows them, so text a server appends to it ("https://a.example" + ".evil.test",
// + "@evil.test/") lands in the host.
func bareAuthority(raw string) bool {
	i := strings.Index(raw, "://")
	return i >= 0 && !strings.ContainsAny(raw[i+3:], "/?#")
}

// splitURL is the target of a call whose URL, read clear as host, ends at its host: clear
// when the call carries no other text a server could append to it (joinable), else
// unclear, its raw text the URL's and every such text's. what names the URL's place.
func (w *urlWalk) splitURL(args map[string]any, what, host string) (target, unclear string) {
	w.seen, w.n, w.first = 0, 0, nil
	w.visit(args, func(w *urlWalk, top, s string, key bool) {
		if key || !joinable(s) {
			return
		}
		w.count(s)
	})
	if w.n == 0 {
		return host, ""
	}
	more := ""
	if w.n > 1 {
		more = fmt.Sprintf(", and %d more", w.n-1)
	}
	return w.text.String(), fmt.Sprintf("%s ends at its host, so a server that appends other text to it (%s%s) sends to the host the joined text names", what, w.first[0].what(), more)
}

// joinable says whether s, appended to a URL that ends at its host, could change the
// host: text that is not itself a URL and does not start the URL's path, query or
// fragment (tabs and newlines dropped, as WHATWG drops them).
func joinable(s string) bool {
	s = strings.TrimLeft(s, "\t\n\r")
	return s != "" && s[0] != '/' && s[0] != '?' && s[0] != '#' && !urlShaped(s)
}

// Bounds of the walk through a call's arguments in search of URLs. Arguments nested
// deeper, or holding more values, are not read whole, and the target is then unclear (a
// URL could hide past the bound). strictjson refuses nesting past 200 levels anyway; a
// server's ordinary arguments stay far below both.
const (
	maxURLWalkDepth  = 64
	maxURLWalkValues = 1 << 16
)

// Bounds of what an unclear target says: a value's place ("request.url") is cut at
// maxNameBytes, a reason names at most maxShownURLs places and counts the rest, and the
// raw text is cut at maxTargetBytes (rawText). A call carrying thousands of URLs under a
// long name would otherwise repeat the name for each.
const (
	maxNameBytes   = 256
	maxShownURLs   = 4
	maxTargetBytes = 4096
)

// foundURL is a string in a call's arguments that a client would take for a URL (or, for
// splitURL, text): where it is (name: "endpoint", "request.url", "urls[1]", cut at
// maxNameBytes; for an object key, the object holding it, "" for an argument's own name),
// and its text as given.
type foundURL struct {
	name, raw string
	key       bool
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

// labels names the places of the first URLs found, for a reason: "a, b, c, d, and 6 more".
func (w *urlWalk) labels() string {
	names := make([]string, 0, len(w.first))
	for _, u := range w.first {
		names = append(names, string(appendLabel(nil, u.name, u.key)))
	}
	return listed(names, w.n)
}

// listed is the first maxShownURLs of names, of n in all, for a reason.
func listed(names []string, n int) string {
	if len(names) > maxShownURLs {
		names = names[:maxShownURLs]
	}
	s := strings.Join(names, ", ")
	if n > len(names) {
		s += fmt.Sprintf(", and %d more", n-len(names))
	}
	return s
}

// appendLabel appends a place as the raw text of an unclear target names it: "endpoint",
// "hooks(key)", "(name)".
func appendLabel(b []byte, name string, key bool) []byte {
	switch {
	case !key:
		return append(b, name...)
	case name == "":
		return append(b, "(name)"...)
	}
	return append(append(b, name...), "(key)"...)
}

// urls walks args for every URL-shaped string (urlShaped), values and object keys alike,
// in key order, and counts those skip does not pass over (nil: none): the first
// maxShownURLs are kept, named, and each goes into the raw text as label=url. short is
// set, saying why, when the walk stopped at one of its bounds. It runs for every call of a
// tool lev does not know, a file's whole content among its values, so it copies nothing
// but the few it names and the capped text.
func (w *urlWalk) urls(args map[string]any, skip func(top, raw string) bool) {
	w.visit(args, func(w *urlWalk, top, s string, key bool) {
		if urlShaped(s) && (skip == nil || skip(top, s)) {
			w.count(s)
		}
	})
}

// count adds the string at hand, s (an object's key when w.atKey), to what the walk found.
func (w *urlWalk) count(s string) {
	key := w.atKey
	w.n++
	w.nameBuf = w.appendName(w.nameBuf[:0], key)
	if len(w.first) < maxShownURLs {
		w.first = append(w.first, foundURL{name: string(w.nameBuf), raw: s, key: key})
	}
	label := w.nameBuf // the name as the raw text labels it (appendLabel)
	switch {
	case key && len(label) == 0:
		label = append(label, "(name)"...)
	case key:
		label = append(label, "(key)"...)
	}
	w.nameBuf = label
	w.text.fieldBytes(label, s)
}

// pathStep is one step from an argument to a nested value: an object key or an array index.
type pathStep struct {
	key   string
	index int
	array bool
}

// urlWalk is the state of a walk through a call's arguments: the path to the value at hand
// (named only for a value counted), the values seen against the bound, and what it found:
// how many, the first few, the raw text naming them all.
type urlWalk struct {
	path  []pathStep
	seen  int
	short string
	atKey bool // the string at hand is an object's key (the path's last step)

	n     int
	first []foundURL
	text  rawText
	// bareAt names a URL to the target's host that ends at its host (splitURL), if any.
	bareAt string

	nameBuf []byte
}

// appendName appends the path to the string at hand ("request.url", "urls[1]"; for a key,
// the object's), cut at maxNameBytes and marked so with "…". It copies no more than that
// of a long key.
func (w *urlWalk) appendName(b []byte, key bool) []byte {
	start := len(b)
	steps := w.path
	if key {
		steps = steps[:len(steps)-1]
	}
	for i, st := range steps {
		switch {
		case st.array:
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(st.index), 10)
			b = append(b, ']')
		case i > 0:
			b = append(b, '.')
			fallthrough
		default:
			room := max(maxNameBytes-(len(b)-start), 0)
			b = append(b, st.key[:min(len(st.key), room+1)]...) // a byte past the room shows the cut
		}
		if len(b)-start > maxNameBytes {
			return append(wholeRunes(b[:start+maxNameBytes]), "…"...)
		}
	}
	return b
}

// here is the place of the string at hand, named.
func (w *urlWalk) here() foundURL {
	return foundURL{name: string(w.appendName(nil, w.atKey)), key: w.atKey}
}

// wholeRunes is b without a UTF-8 sequence cut short at its end.
func wholeRunes(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// visit calls f for every string in args, object keys and values alike, walking nested
// objects and arrays in key order; for a key, with w.atKey set and the key as the last
// path step. It stops, setting w.short, at the walk's bounds.
func (w *urlWalk) visit(args map[string]any, f func(w *urlWalk, top, s string, key bool)) {
	w.path = w.path[:0]
	for _, k := range sortedKeys(args) {
		w.path = append(w.path[:0], pathStep{key: k})
		w.atKey = true
		f(w, k, k, true)
		w.atKey = false
		if !w.walk(args[k], k, 1, f) {
			return
		}
	}
}

func (w *urlWalk) walk(v any, top string, depth int, f func(w *urlWalk, top, s string, key bool)) bool {
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
		f(w, top, v, false)
	case map[string]any:
		for _, k := range sortedKeys(v) {
			// A server may take an object's keys for destinations too (a map of URLs to
			// what to send each).
			w.path = append(w.path, pathStep{key: k})
			w.atKey = true
			f(w, top, k, true)
			w.atKey = false
			ok := w.walk(v[k], top, depth+1, f)
			w.path = w.path[:len(w.path)-1]
			if !ok {
				return false
			}
		}
	case []any:
		for i, e := range v {
			w.path = append(w.path, pathStep{index: i, array: true})
			ok := w.walk(e, top, depth+1, f)
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

// rawText builds the raw text of an unclear target ("path=/tmp/x endpoint=https://…"),
// which is also the key of a session answer. It keeps the first maxTargetBytes; past them
// it hashes the whole, and the text ends in its length and hash: a cut text is longer than
// any whole one, and two calls whose texts differ anywhere keep different keys.
type rawText struct {
	b   []byte
	n   int
	h   hash.Hash
	buf []byte
}

// field adds "label=value", after a space unless it is the first.
func (t *rawText) field(label, value string) {
	if t.n > 0 {
		t.add(" ")
	}
	t.add(label)
	t.add("=")
	t.add(value)
}

func (t *rawText) fieldBytes(label []byte, value string) {
	if t.n > 0 {
		t.add(" ")
	}
	t.addBytes(label)
	t.add("=")
	t.add(value)
}

// addBytes is add for a place's name, which is cut at 256 bytes: the copy is small.
func (t *rawText) addBytes(p []byte) { t.add(string(p)) }

func (t *rawText) add(s string) {
	t.n += len(s)
	if t.h == nil && len(t.b)+len(s) <= maxTargetBytes {
		t.b = append(t.b, s...)
		return
	}
	t.spill()
	t.b = append(t.b, s[:min(len(s), maxTargetBytes-len(t.b))]...)
	for len(s) > 0 { // hashed through a buffer: a long value is not copied whole
		c := copy(t.buf, s)
		t.h.Write(t.buf[:c])
		s = s[c:]
	}
}

// spill starts the hash, of the text kept so far, the first time the text outgrows its cap.
func (t *rawText) spill() {
	if t.h == nil {
		t.h = sha256.New()
		t.h.Write(t.b)
		t.buf = make([]byte, 512)
	}
}

func (t *rawText) String() string {
	if t.h == nil {
		return string(t.b)
	}
	return fmt.Sprintf("%s… (%d bytes in all, sha256 %x)", wholeRunes(t.b), t.n, t.h.Sum(nil)[:16])
}

// capRaw is s as the raw text of an unclear target: whole up to maxTargetBytes, else cut
// as rawText cuts it.
func capRaw(s string) string {
	if len(s) <= maxTargetBytes {
		return s
	}
	var t rawText
	t.add(s)
	return t.String()
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
		return capUnclear(hostOf(t))
	case hostTargeted:
		return capUnclear(plainHost(t))
	}
	return t, ""
}

// capUnclear caps an unclear target's raw text (capRaw); a clear one is left whole.
func capUnclear(target, unclear string) (string, string) {
	if unclear != "" {
		target = capRaw(target)
	}
	return target, unclear
}

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
