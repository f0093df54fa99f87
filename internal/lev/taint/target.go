package taint

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"unicode"
)

// targetKeys are the arguments a tool lev does not know (an MCP or script tool) may name
// its target by, in the order they were looked up before a call could name several.
var targetKeys = []string{"url", "target", "host", "command", "path"}

// Target extracts what a policy matches an outbound call against: the URL's host for the
// web and HTTP tools, the command line for shell, the query for web_search, "result" for
// submit_output. For a tool lev does not know it is read from the one argument among url
// (its host), target, host, command and path (names compared case-insensitively) the call
// carries; "" when it carries none.
//
// unclear is non-empty when lev cannot read the target unambiguously: a url that is not a
// clean absolute http(s) URL, a host that is not a plain host name, or a call naming its
// target by more than one of those arguments. The client that acts on the call (a Node or
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
// call through to the other.
func otherTarget(args map[string]any) (target, unclear string) {
	rank := targetRank
	var found []string
	for k := range args {
		if _, ok := rank[strings.ToLower(k)]; ok {
			found = append(found, k)
		}
	}
	sort.Slice(found, func(i, j int) bool { return rank[strings.ToLower(found[i])] < rank[strings.ToLower(found[j])] })
	switch len(found) {
	case 0:
		return "", ""
	case 1:
	default:
		parts := make([]string, 0, len(found))
		for _, k := range found {
			parts = append(parts, k+"="+display(args[k]))
		}
		return strings.Join(parts, " "), fmt.Sprintf("the call names its target by %d arguments (%s), and the server may act on any of them", len(found), strings.Join(found, ", "))
	}
	k := found[0]
	v, ok := args[k].(string)
	if !ok {
		return display(args[k]), fmt.Sprintf("its %s argument is not a string", k)
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

// GivenTarget is the target of `lev policy test TOOL --target T`, derived as the live gate
// derives it: for a tool whose target is a URL's host (the web and HTTP tools, any tool lev
// does not know), a T written as a URL is read as a url argument is, so a dry run of an
// unclear URL reports what the live gate does with it.
//
// A plain T for the web and HTTP tools is read as a host, as the live gate would read it
// from a URL (lower-cased, without port), so `--target API.example.com` is what a call to
// https://API.example.com/ is. For other tools a plain T may be a path, a command line or a
// channel: it is taken as written.
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
	case strings.Contains(t, "://"):
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
