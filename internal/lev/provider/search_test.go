package provider

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestUsage: each provider records the tokens its upstream reports, buffered and
// streamed (OpenAI's stream asks for its usage frame with stream_options.include_usage).
func TestUsage(t *testing.T) {
	cases := []struct {
		name, ctype, reply string
		mk                 func(string) Provider
		want               Usage
	}{
		{"openai buffered", "application/json",
			`{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4}}}`,
			func(b string) Provider { return &OpenAI{BaseURL: b, Client: testClient()} },
			Usage{InputTokens: 11, OutputTokens: 5, CacheReadTokens: 4, Calls: 1}},
		{"openai stream", "text/event-stream",
			"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":6}}\n\ndata: [DONE]\n\n",
			func(b string) Provider { return &OpenAI{BaseURL: b, Stream: true, Client: testClient()} },
			Usage{InputTokens: 12, OutputTokens: 6, Calls: 1}},
		{"anthropic buffered", "application/json",
			`{"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":20,"output_tokens":7,"cache_creation_input_tokens":3,"cache_read_input_tokens":9}}`,
			func(b string) Provider { return &Anthropic{BaseURL: b, Client: testClient()} },
			Usage{InputTokens: 20, OutputTokens: 7, CacheReadTokens: 9, CacheWriteTokens: 3, Calls: 1}},
		{"anthropic stream", "text/event-stream",
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":30,\"output_tokens\":1}}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":8}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			func(b string) Provider { return &Anthropic{BaseURL: b, Stream: true, Client: testClient()} },
			Usage{InputTokens: 30, OutputTokens: 8, Calls: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body map[string]any
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				json.NewDecoder(r.Body).Decode(&body)
				w.Header().Set("Content-Type", tc.ctype)
				io.WriteString(w, tc.reply)
			}))
			defer srv.Close()
			resp, err := tc.mk(srv.URL).Complete(context.Background(), convo)
			if err != nil || resp.Text != "hi" {
				t.Fatalf("resp %+v err %v", resp, err)
			}
			if resp.Usage != tc.want {
				t.Fatalf("usage %+v, want %+v", resp.Usage, tc.want)
			}
			if tc.name == "openai stream" && !reflect.DeepEqual(body["stream_options"], map[string]any{"include_usage": true}) {
				t.Errorf("stream_options %v", body["stream_options"])
			}
		})
	}
}

// TestSearch: each provider's web search sends exactly lev's server tool (the form the
// broker's body policy allows) to the right endpoint and reads the answer and its
// sources; an endpoint without the Responses API (404) is "not available"; the scripted
// provider answers from [[search]] rules, and a script without them has no web search.
func TestSearch(t *testing.T) {
	cases := []struct {
		name, path, reply string
		code              int
		mk                func(string) Searcher
		tool              map[string]any
		text              string
		sources           []Source
		err               error
	}{
		{"anthropic", "/v1/messages", `{"content":[
			{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"go release"}},
			{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://go.dev/doc/devel/release","title":"Release History","encrypted_content":"xx","page_age":null}]},
			{"type":"text","text":"Go 1.25 is out.","citations":[{"type":"web_search_result_location","url":"https://go.dev/blog","title":"The Go Blog","encrypted_index":"e","cited_text":"Go 1.25"}]}],
			"stop_reason":"end_turn","usage":{"input_tokens":100,"output_tokens":20,"server_tool_use":{"web_search_requests":1}}}`, 200,
			func(b string) Searcher { return &Anthropic{BaseURL: b, Client: testClient()} },
			AnthropicWebSearchTool(), "Go 1.25 is out.",
			[]Source{{"Release History", "https://go.dev/doc/devel/release"}, {"The Go Blog", "https://go.dev/blog"}}, nil},
		{"anthropic search error", "/v1/messages", `{"content":[{"type":"web_search_tool_result","tool_use_id":"s","content":{"type":"web_search_tool_result_error","error_code":"max_uses_exceeded"}}],"stop_reason":"end_turn"}`, 200,
			func(b string) Searcher { return &Anthropic{BaseURL: b, Client: testClient()} },
			AnthropicWebSearchTool(), "", nil, errors.New("web search failed upstream: max_uses_exceeded")},
		{"openai responses", "/v1/responses", `{"id":"resp_1","object":"response","output":[
			{"type":"web_search_call","id":"ws_1","status":"completed"},
			{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Go 1.25 is out.","annotations":[{"type":"url_citation","start_index":0,"end_index":5,"url":"https://go.dev/blog","title":"The Go Blog"}]}]}],
			"usage":{"input_tokens":50,"output_tokens":10}}`, 200,
			func(b string) Searcher { return &OpenAI{BaseURL: b + "/v1", Client: testClient()} },
			OpenAIWebSearchTool(), "Go 1.25 is out.", []Source{{"The Go Blog", "https://go.dev/blog"}}, nil},
		{"openai-compatible endpoint without the Responses API", "/v1/responses", `{"error":"not found"}`, 404,
			func(b string) Searcher { return &OpenAI{BaseURL: b + "/v1", Client: testClient()} },
			OpenAIWebSearchTool(), "", nil, ErrSearchUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body map[string]any
			var path string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				path = r.URL.Path
				json.NewDecoder(r.Body).Decode(&body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				io.WriteString(w, tc.reply)
			}))
			defer srv.Close()
			res, err := tc.mk(srv.URL).Search(context.Background(), &SearchRequest{Model: "m", Query: "go release"})
			if path != tc.path {
				t.Fatalf("path %q, want %q", path, tc.path)
			}
			tools, _ := body["tools"].([]any)
			want, _ := json.Marshal(tc.tool)
			var wantTool any
			json.Unmarshal(want, &wantTool)
			if len(tools) != 1 || !reflect.DeepEqual(tools[0], wantTool) {
				t.Fatalf("tools %v, want exactly [%s]", tools, want)
			}
			if !strings.Contains(string(mustJSON(body)), "go release") {
				t.Fatalf("the query is not in the request: %v", body)
			}
			if tc.err != nil {
				if err == nil || !(errors.Is(err, tc.err) || strings.Contains(err.Error(), tc.err.Error())) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil || res.Text != tc.text || !reflect.DeepEqual(res.Sources, tc.sources) || res.Usage.Calls != 1 {
				t.Fatalf("res %+v err %v", res, err)
			}
		})
	}
}

func mustJSON(v any) []byte { b, _ := json.Marshal(v); return b }

func TestScriptedSearch(t *testing.T) {
	dir := t.TempDir()
	with := filepath.Join(dir, "with.toml")
	os.WriteFile(with, []byte("[[search]]\nquery_contains = \"golang\"\ntext = \"Go is a language\"\n[[search.source]]\ntitle = \"Go\"\nurl = \"https://go.dev/\"\n"), 0o644)
	without := filepath.Join(dir, "without.toml")
	os.WriteFile(without, []byte("[[rule]]\ntext = \"hi\"\n"), 0o644)
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[[search]]\ntext = \"x\"\n[[search.source]]\ntitle = \"no url\"\n"), 0o644)
	s, err := LoadScripted(with)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Search(context.Background(), &SearchRequest{Query: "what is golang"})
	if err != nil || res.Format() != "Go is a language\n\nSources:\n- Go <https://go.dev/>" {
		t.Fatalf("res %+v err %v", res, err)
	}
	if _, err := s.Search(context.Background(), &SearchRequest{Query: "rust"}); err == nil || !strings.Contains(err.Error(), `no [[search]] rule matches query "rust"`) {
		t.Fatalf("unmatched query: %v", err)
	}
	n, err := LoadScripted(without)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Search(context.Background(), &SearchRequest{Query: "golang"}); !errors.Is(err, ErrSearchUnavailable) {
		t.Fatalf("no [[search]] rules: %v", err)
	}
	if _, err := LoadScripted(bad); err == nil || !strings.Contains(err.Error(), "search 1 source 1: url is required") {
		t.Fatalf("source without url: %v", err)
	}
}
