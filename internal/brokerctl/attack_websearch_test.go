package brokerctl

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/lever-jail/lever/internal/lev/provider"
)

// TestWebSearchServerToolException: the body policy lets through exactly one server tool
// per provider, in exactly the form lev's web_search sends it (provider.AnthropicWebSearchTool,
// provider.OpenAIWebSearchTool, marshalled here as lev marshals them): the controls reach
// the upstream byte for byte over real mTLS. Every variant is refused 403 body_refused
// before the upstream has the body whole: other server tool types (a newer version, the
// preview name, a case change, web_fetch), extra keys (domain filters, a location, a
// cache setting), other values (live access on, a string "false", another name, a
// max_uses past the bound or not an integer), keys spelled in another case (a
// case-sensitive upstream would not see external_web_access at all, and fetch live),
// repeated keys in any spelling a decoder folds together, and a second server tool.
func TestWebSearchServerToolException(t *testing.T) {
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
	}), func(o *Options) { o.LLMRoutes = []string{"POST /v1/messages", "POST /v1/responses"} })
	cert := h.workerCert("w1")
	c := h.client(&cert)
	levForm := func(tool map[string]any) string {
		b, err := json.Marshal(tool)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	an, oa := levForm(provider.AnthropicWebSearchTool()), levForm(provider.OpenAIWebSearchTool())
	anBody := func(tools string) string {
		return `{"model":"claude","max_tokens":1024,"messages":[{"role":"user","content":[{"type":"text","text":"q"}]}],"tools":[` + tools + `]}`
	}
	oaBody := func(tools string) string { return `{"model":"gpt","input":"q","tools":[` + tools + `]}` }
	const fn = `{"type":"function","name":"f","parameters":{"type":"object"}}`
	rows := []struct {
		name, path, body string
		ok               bool
		why              string // part of the refusal
	}{
		{"control: lev's Anthropic web search", "/v1/messages", anBody(an), true, ""},
		{"control: lev's OpenAI web search", "/v1/responses", oaBody(oa), true, ""},
		{"control: Anthropic form without max_uses, beside a function tool", "/v1/messages", anBody(`{"type":"web_search_20250305","name":"web_search"},` + fn), true, ""},
		{"control: OpenAI form, keys in the other order", "/v1/responses", oaBody(`{"external_web_access":false,"type":"web_search"}`), true, ""},
		// other type names
		{"newer Anthropic version", "/v1/messages", anBody(`{"type":"web_search_20260209","name":"web_search"}`), false, "server tool"},
		{"OpenAI preview name", "/v1/responses", oaBody(`{"type":"web_search_preview","external_web_access":false}`), false, "server tool"},
		{"type in upper case", "/v1/responses", oaBody(`{"type":"WEB_SEARCH","external_web_access":false}`), false, "server tool"},
		{"type with a trailing space", "/v1/responses", oaBody(`{"type":"web_search ","external_web_access":false}`), false, "server tool"},
		{"web_fetch beside the search", "/v1/messages", anBody(an + `,{"type":"web_fetch_20250910","name":"web_fetch"}`), false, "server tool"},
		// extra keys
		{"Anthropic allowed_domains", "/v1/messages", anBody(`{"type":"web_search_20250305","name":"web_search","allowed_domains":["evil.test"]}`), false, "allowed_domains"},
		{"Anthropic user_location", "/v1/messages", anBody(`{"type":"web_search_20250305","name":"web_search","user_location":{"type":"approximate","city":"x"}}`), false, "user_location"},
		{"Anthropic cache_control", "/v1/messages", anBody(`{"type":"web_search_20250305","name":"web_search","cache_control":{"type":"ephemeral"}}`), false, "cache_control"},
		{"OpenAI filters", "/v1/responses", oaBody(`{"type":"web_search","external_web_access":false,"filters":{"allowed_domains":["evil.test"]}}`), false, "filters"},
		{"OpenAI search_context_size", "/v1/responses", oaBody(`{"type":"web_search","external_web_access":false,"search_context_size":"high"}`), false, "search_context_size"},
		// other values
		{"OpenAI live access on", "/v1/responses", oaBody(`{"type":"web_search","external_web_access":true}`), false, "not the value lev sends"},
		{"OpenAI live access left out", "/v1/responses", oaBody(`{"type":"web_search"}`), false, "external_web_access"},
		{"OpenAI false as a string", "/v1/responses", oaBody(`{"type":"web_search","external_web_access":"false"}`), false, "not the value lev sends"},
		{"OpenAI null", "/v1/responses", oaBody(`{"type":"web_search","external_web_access":null}`), false, "not the value lev sends"},
		{"OpenAI 0", "/v1/responses", oaBody(`{"type":"web_search","external_web_access":0}`), false, "not the value lev sends"},
		{"Anthropic another name", "/v1/messages", anBody(`{"type":"web_search_20250305","name":"web_fetch"}`), false, "not the value lev sends"},
		{"Anthropic without a name", "/v1/messages", anBody(`{"type":"web_search_20250305"}`), false, "without"},
		{"Anthropic max_uses past the bound", "/v1/messages", anBody(`{"type":"web_search_20250305","name":"web_search","max_uses":100}`), false, "not the value lev sends"},
		{"Anthropic max_uses as a string", "/v1/messages", anBody(`{"type":"web_search_20250305","name":"web_search","max_uses":"3"}`), false, "not the value lev sends"},
		{"Anthropic max_uses fractional", "/v1/messages", anBody(`{"type":"web_search_20250305","name":"web_search","max_uses":1.5}`), false, "not the value lev sends"},
		{"Anthropic max_uses 0", "/v1/messages", anBody(`{"type":"web_search_20250305","name":"web_search","max_uses":0}`), false, "not the value lev sends"},
		{"Anthropic name as an object", "/v1/messages", anBody(`{"type":"web_search_20250305","name":{"x":1}}`), false, "not the value lev sends"},
		// case changes in keys
		{"OpenAI key in another case", "/v1/responses", oaBody(`{"type":"web_search","External_Web_Access":false}`), false, "spelled as lev spells them"},
		{"Anthropic Type key", "/v1/messages", anBody(`{"Type":"web_search_20250305","name":"web_search"}`), false, "spelled as lev spells them"},
		{"long s in a key", "/v1/responses", oaBody(`{"type":"web_search","external_web_acce\u017fs":false}`), false, "spelled as lev spells them"},
		// duplicates
		{"OpenAI key twice, live last", "/v1/responses", oaBody(`{"type":"web_search","external_web_access":false,"external_web_access":true}`), false, "repeats key"},
		{"OpenAI key twice in two cases", "/v1/responses", oaBody(`{"type":"web_search","EXTERNAL_WEB_ACCESS":true,"external_web_access":false}`), false, "repeats key"},
		{"type twice, mcp last", "/v1/responses", oaBody(`{"type":"web_search","external_web_access":false,"type":"mcp"}`), false, "repeats key"},
		{"type twice, function first", "/v1/responses", oaBody(`{"type":"function","type":"web_search","external_web_access":false}`), false, "repeats key"},
		{"the search declared twice", "/v1/messages", anBody(an + "," + an), false, "more than one server tool"},
		{"both providers' forms at once", "/v1/responses", oaBody(oa + "," + an), false, "more than one server tool"},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			mu.Lock()
			before := len(got)
			mu.Unlock()
			req, _ := http.NewRequest("POST", h.url+"/llm"+r.path, strings.NewReader(r.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			mu.Lock()
			reached := len(got) > before
			var last string
			if reached {
				last = got[len(got)-1]
			}
			mu.Unlock()
			if r.ok {
				if resp.StatusCode != 200 || last != r.body {
					t.Fatalf("%d %s; upstream got it intact: %v", resp.StatusCode, capText(string(b), 300), last == r.body)
				}
				return
			}
			if resp.StatusCode != 403 || !strings.Contains(string(b), "body_refused") || !strings.Contains(string(b), r.why) || reached {
				t.Fatalf("%d %s (want 403 body_refused saying %q); upstream received a complete body: %v", resp.StatusCode, capText(string(b), 400), r.why, reached)
			}
		})
	}
}
