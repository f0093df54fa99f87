package config

import (
	"fmt"
	"strings"
)

// The broker forwards a client's request header upstream only when the header is on the
// allowlist of the upstream's API kind (DefaultLLMHeaders, plus broker.llm_extra_headers)
// and not refused by LLMHeaderRefused. Everything else is dropped: a gateway upstream
// obeys headers the jail could send (Helicone-Target-Url, ...-Api-Base, ...-Fallbacks)
// and would send the host's key wherever they point.

// llmHeadersCommon are the headers the official SDKs send with every model call, whatever
// the API: the body's type, what the client accepts, who it is, the Stainless SDKs'
// telemetry (x-stainless-lang, -package-version, -os, -arch, -runtime, -runtime-version,
// -retry-count, -timeout, -async, -helper-method...) and a retry's idempotency key.
var llmHeadersCommon = []string{"accept", "content-type", "user-agent", "idempotency-key", "x-stainless-*"}

// llmHeadersKind are the API's own headers, per kind.
var llmHeadersKind = map[string][]string{
	LLMKindAnthropic: {"anthropic-version", "anthropic-beta"},
	LLMKindOpenAI:    {"openai-beta"},
}

// DefaultLLMHeaders are the request headers the broker forwards for an API kind: lower
// case, a trailing "-*" standing for every name that begins with what precedes the '*'.
func DefaultLLMHeaders(kind string) []string {
	return append(append([]string(nil), llmHeadersCommon...), llmHeadersKind[kind]...)
}

// Request headers never forwarded, whatever an allowlist says (lower case). Client-sent
// credentials are dropped so the only credential upstream sees is the host's key;
// hop-by-hop and framing headers belong to one connection and the broker sets its own;
// Range and the conditionals would let a client fetch a response in pieces, each too
// short to hold the whole key; Accept-Encoding, TE and Accept-Charset would make the
// upstream encode the body in a way the masker cannot read; method and URL overrides
// would let a client reach an endpoint the route allowlist refuses.
var llmHeadersFraming = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "te": true,
	"trailer": true, "transfer-encoding": true, "upgrade": true, "host": true,
	"http2-settings": true, "expect": true, "content-length": true, "accept-encoding": true,
}

var llmHeadersNever = map[string]bool{
	"authorization": true, "proxy-authorization": true, "x-api-key": true, "api-key": true,
	"cookie": true, "accept-charset": true, "range": true, "if-range": true,
	"forwarded": true, "via": true, "max-forwards": true,
	"x-http-method-override": true, "x-http-method": true, "x-method-override": true,
	"x-original-url": true, "x-rewrite-url": true, "x-original-method": true,
}

// llmHeadersNeverPrefix extends the lists to families: every conditional (If-*), every
// X-Forwarded-*, every Proxy-*.
var llmHeadersNeverPrefix = []string{"if-", "x-forwarded-", "proxy-"}

// credentialWords mark a header or query parameter that names a credential or picks the
// account, organisation or project the key is spent on (OpenAI-Organization,
// OpenAI-Project, x-goog-api-key, ?key=, ?access_token=, X-Session-Token...): the only
// credential and account upstream sees are the host's, so none of these come from the jail.
var credentialWords = []string{"key", "token", "auth", "secret", "passw", "cookie", "session", "credential", "organization", "organisation", "project", "account", "tenant", "workspace"}

// credentialAllowed are names that hold a credential word without being one.
var credentialAllowed = map[string]bool{"idempotency-key": true}

// routingWords mark a header that could choose where a gateway sends the request, or
// with what (Helicone-Target-Url, X-Portkey-Config, X-Api-Base, X-Fallbacks, X-Upstream-
// Host): on the jail's word the key would go to a host the operator never named.
var routingWords = []string{"url", "host", "target", "base", "endpoint", "route", "routing", "fallback", "upstream", "provider", "redirect", "forward", "proxy", "destination", "gateway", "config"}

// NamesCredential reports whether a (lower-case, '_' read as '-') header or parameter name
// carries a credential word.
func NamesCredential(n string) bool {
	if credentialAllowed[n] {
		return false
	}
	return containsAny(n, credentialWords)
}

// NamesRouting reports whether a (lower-case) header or parameter name carries a routing
// word: a gateway could read it as where to send the request.
func NamesRouting(n string) bool { return containsAny(n, routingWords) }

func containsAny(n string, words []string) bool {
	for _, w := range words {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// LLMHeaderFraming reports whether a (lower-case) header belongs to the connection or
// its framing, which the broker sets itself: dropping it is no news for the audit log.
func LLMHeaderFraming(n string) bool { return llmHeadersFraming[n] }

// LLMHeaderRefused says why a header name (any case) is never forwarded upstream, or ""
// when an allowlist may let it through. A name with a character outside letters, digits
// and '-' is refused: some servers read "Accept_Encoding" as Accept-Encoding.
func LLMHeaderRefused(name string) string {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Sprintf("has %q; only letters, digits and '-' are forwarded (some servers read '_' as '-')", string(c))
		}
	}
	n := strings.ToLower(name)
	switch {
	case llmHeadersFraming[n]:
		return "belongs to the connection or the body's framing, which the broker sets itself"
	case NamesCredential(n):
		return "names a credential or account; the broker's key is the only one upstream sees"
	case llmHeadersNever[n]:
		return "could change the method, the route, or how the response is encoded or sliced"
	case NamesRouting(n):
		return "could choose where a gateway sends the request (and the key)"
	}
	for _, p := range llmHeadersNeverPrefix {
		if strings.HasPrefix(n, p) {
			return fmt.Sprintf("is one of the %s* headers", p)
		}
	}
	return ""
}

// CheckLLMHeader checks one broker.llm_extra_headers entry: a header name of letters,
// digits and '-' (at most 64 bytes), or a family "prefix-*" whose prefix has at least two
// characters before its '-', that the broker may forward at all (LLMHeaderRefused). A
// family is checked by its prefix, and every header of it again when it is sent.
func CheckLLMHeader(h string) error {
	name, family := strings.CutSuffix(h, "*")
	switch {
	case name == "":
		return fmt.Errorf("%q is not a header name", h)
	case len(name) > 64:
		return fmt.Errorf("%q is %d bytes; a header name here is at most 64", h, len(name))
	case family && (!strings.HasSuffix(name, "-") || len(name) < 3):
		return fmt.Errorf("%q: a family of headers is written \"prefix-*\", with at least two characters before the '-'", h)
	case strings.HasPrefix(name, "-") || strings.Contains(name, "--") || !family && strings.HasSuffix(name, "-"):
		return fmt.Errorf("%q is not a header name", h)
	}
	if why := LLMHeaderRefused(strings.TrimSuffix(name, "-")); why != "" {
		return fmt.Errorf("%q %s; it is never forwarded", h, why)
	}
	if family {
		for _, p := range llmHeadersNeverPrefix {
			if strings.HasPrefix(p, strings.ToLower(name)) {
				return fmt.Errorf("%q would take in the %s* headers, which are never forwarded", h, p)
			}
		}
	}
	return nil
}
