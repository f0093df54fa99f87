package taint

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/lever-jail/lever/internal/lev/toolcat"
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
	row, _ := toolcat.Lookup(tool) // a tool with no row has its target read from its arguments
	switch row.Target {
	case toolcat.TargetHost:
		return capUnclear(hostOf(str("url")))
	case toolcat.TargetQuery:
		return str("query"), ""
	case toolcat.TargetCommand:
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
	case toolcat.TargetResult:
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
	row, known := toolcat.Lookup(tool)
	hostTargeted := row.Target == toolcat.TargetHost
	if known && !hostTargeted {
		return t, ""
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
