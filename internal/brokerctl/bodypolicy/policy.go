// Package bodypolicy reads a model-call request body as it streams to the upstream and
// refuses one that would make the upstream act for the jail beyond the model call.
//
// A model-call route is not only a model call: the request body can make the upstream
// itself reach out to the network on the jail's behalf — a server tool (Anthropic's
// web_fetch, web_search, code execution; OpenAI's web_search, mcp, file_search), an MCP
// server the upstream connects to (mcp_servers), or an image or document "source" given
// as a URL the upstream downloads. Each is an egress channel past LEVER_EGRESS: the jail
// names any URL and the upstream fetches it, carrying whatever the jail put in it. The
// broker therefore reads every request body below /llm/ as it streams through (Body) and
// refuses (403, audited) a body that asks for any of these. The body is scanned as it passes:
// each chunk read from the jail is scanned before any byte of it goes on, and whatever
// the policy refuses comes before the end of the JSON value, so a refused body never
// reaches the upstream complete and is never acted on. The last byte is also held back
// until the end has been read and found clean (belt and braces: a body refused only at
// its end is one the upstream could not parse either).
package bodypolicy

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// policyError is a body the broker refuses; its text names what was found.
type policyError struct{ msg string }

func (e *policyError) Error() string { return e.msg }

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

// ClientTool reports whether a declared tool type is one the client executes itself.
func ClientTool(typ string) bool { return clientToolTypes[typ] || clientToolRE.MatchString(typ) }

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
		return &policyError{msg: fmt.Sprintf("server tool %q with key %q: keys must be spelled as lev spells them (lower case); refused", t.typ, capText(t.bent, 128))}
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
			return &policyError{msg: fmt.Sprintf("server tool %q without \"name\": \"web_search\"; refused", t.typ)}
		}
	case openaiWebSearch:
		want = map[string]func(string) bool{
			"type":                func(string) bool { return true },
			"external_web_access": func(v string) bool { return v == "l:false" },
		}
		if _, ok := t.vals["external_web_access"]; !ok {
			return &policyError{msg: fmt.Sprintf("server tool %q is allowed only with \"external_web_access\": false (search from the upstream's index, no live fetch of a URL the jail names); refused", t.typ)}
		}
	}
	for k, v := range t.vals {
		ok, known := want[k]
		if !known {
			return &policyError{msg: fmt.Sprintf("server tool %q with key %q: only lev's own form of the web search tool is allowed (no other keys); refused", t.typ, capText(k, 128))}
		}
		if !ok(v) {
			return &policyError{msg: fmt.Sprintf("server tool %q with %q = %s: not the value lev sends; refused", t.typ, k, capText(strings.TrimPrefix(strings.TrimPrefix(v, "s:"), "l:"), 128))}
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
		if !ClientTool(v) {
			s.fail("tool type %q is a server tool the upstream runs (it can reach the network on the jail's behalf); only tools the client executes (function, custom, ...) are allowed", capText(v, 128))
		}
	}
}
