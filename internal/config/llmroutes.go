package config

import (
	"fmt"
	"strings"
)

// LLM API kinds, which pick the default broker.llm_routes.
const (
	LLMKindAnthropic = "anthropic"
	LLMKindOpenAI    = "openai"
)

// llmRouteMethods are the methods a broker.llm_routes entry may name.
var llmRouteMethods = []string{"GET", "POST"}

// DefaultLLMRoutes are the model-call routes of an API kind, relative to llm_upstream:
// Anthropic's under /v1 (llm_upstream is the API's root), OpenAI-compatible ones both at
// the base (llm_upstream ends in /v1, as lev's openai provider expects) and under /v1.
// Nothing that reads or changes account state (files, batches, fine-tuning, admin keys)
// is among them.
func DefaultLLMRoutes(kind string) []string {
	if kind == LLMKindAnthropic {
		return []string{"POST /v1/messages", "POST /v1/messages/count_tokens", "GET /v1/models"}
	}
	return []string{
		"POST /chat/completions", "POST /responses", "GET /models",
		"POST /v1/chat/completions", "POST /v1/responses", "GET /v1/models",
	}
}

// ParseLLMRoute splits "METHOD /path" and checks it: an upper-case method the broker
// forwards, one space, and a path of non-empty segments of letters, digits and ._~:-
// with no dot segments and nothing percent-encoded (the broker refuses such paths from
// the jail, so a route naming one could never match).
func ParseLLMRoute(s string) (method, path string, err error) {
	method, path, ok := strings.Cut(s, " ")
	if !ok || method == "" || path == "" {
		return "", "", fmt.Errorf("%q is not \"METHOD /path\" (e.g. \"POST /v1/messages\")", s)
	}
	known := false
	for _, m := range llmRouteMethods {
		known = known || m == method
	}
	if !known {
		return "", "", fmt.Errorf("%q: method %q is not one of %s", s, method, strings.Join(llmRouteMethods, ", "))
	}
	if err := CheckLLMPath(path); err != nil {
		return "", "", fmt.Errorf("%q: %v", s, err)
	}
	return method, path, nil
}

// CheckLLMPath is the rule for a path below the broker's /llm/ (and for a route's path):
// it starts with '/', and every segment is non-empty, not "." or "..", and made of
// letters, digits and . _ ~ : - only. Percent-encoding, backslashes, empty segments and
// a trailing slash are all refused, so there is exactly one spelling of each path and
// the upstream sees the path exactly as checked.
func CheckLLMPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path %q does not start with /", p)
	}
	if len(p) > 512 {
		return fmt.Errorf("path is %d bytes; at most 512", len(p))
	}
	for _, seg := range strings.Split(p[1:], "/") {
		switch seg {
		case "":
			return fmt.Errorf("path %q has an empty segment (// or a trailing /)", p)
		case ".", "..":
			return fmt.Errorf("path %q has a dot segment %q", p, seg)
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._~:-", c) >= 0) {
				return fmt.Errorf("path %q has %q; only letters, digits and . _ ~ : - are allowed (nothing percent-encoded)", p, string(c))
			}
		}
	}
	return nil
}
