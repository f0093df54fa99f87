package brokerctl

import (
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/config"
)

// headerPolicy is the allowlist of client request headers the /llm/ route forwards: the
// defaults of the upstream's API kind plus broker.llm_extra_headers. A header goes
// upstream only when the list names it and config.LLMHeaderRefused does not refuse it
// (the list cannot let a credential or a framing header through, whatever it says).
type headerPolicy struct {
	exact    map[string]bool // lower-case names
	prefixes []string        // lower-case "family-" prefixes (from "family-*")
}

func newHeaderPolicy(kind string, extra []string) *headerPolicy {
	p := &headerPolicy{exact: map[string]bool{}}
	for _, h := range append(config.DefaultLLMHeaders(kind), extra...) {
		h = strings.ToLower(h)
		if prefix, family := strings.CutSuffix(h, "*"); family {
			p.prefixes = append(p.prefixes, prefix)
		} else {
			p.exact[h] = true
		}
	}
	return p
}

// allows says whether the client header name may go upstream.
func (p *headerPolicy) allows(name string, h http.Header) bool {
	if config.LLMHeaderRefused(name) != "" || connectionListed(h, name) {
		return false
	}
	n := strings.ToLower(name)
	if p.exact[n] {
		return true
	}
	for _, pre := range p.prefixes {
		if strings.HasPrefix(n, pre) && len(n) > len(pre) {
			return true
		}
	}
	return false
}

// Caps on the audit field that names dropped headers: the names are the client's, so
// however many it sends, the field stays small.
const (
	maxDroppedNames = 16
	maxDroppedName  = 64
)

// copyTo copies the headers of in that the policy allows into out, and returns the names
// of those it dropped (sorted, capped; never a value), except the connection and framing
// headers every client sends and the broker replaces (Content-Length, Accept-Encoding,
// Connection...): "" when nothing worth noting was dropped.
func (p *headerPolicy) copyTo(out, in http.Header) string {
	var dropped []string
	for k, vs := range in {
		if p.allows(k, in) {
			out[k] = vs
			continue
		}
		if !config.LLMHeaderFraming(strings.ToLower(k)) {
			dropped = append(dropped, k)
		}
	}
	if len(dropped) == 0 {
		return ""
	}
	sort.Strings(dropped)
	more := len(dropped) - maxDroppedNames
	if more > 0 {
		dropped = dropped[:maxDroppedNames]
	}
	for i, d := range dropped {
		dropped[i] = capText(d, maxDroppedName)
	}
	s := strings.Join(dropped, ", ")
	if more > 0 {
		s += " and " + strconv.Itoa(more) + " more"
	}
	return logSafe(s)
}
