package taintgate

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// searchingProvider answers the run's turns from the script and its web searches through
// a real Anthropic client (the search's own Messages call) against a loopback upstream.
type searchingProvider struct {
	*provider.Scripted
	search *provider.Anthropic
}

func (p searchingProvider) Search(ctx context.Context, r *provider.SearchRequest) (*provider.SearchResult, error) {
	return p.search.Search(ctx, r)
}

// plainProvider hides the scripted provider's Search: a provider with no web search.
type plainProvider struct{ p *provider.Scripted }

func (p plainProvider) Complete(ctx context.Context, r *provider.Request) (*provider.Response, error) {
	return p.p.Complete(ctx, r)
}

// TestWebSearchGated: web_search is an outbound tool. After the run read a Private file,
// a search whose query carries it is blocked by the taint gate (AutoBlock, audited) and
// the search upstream never hears of it; the control run (nothing Private read) searches
// through the provider's upstream, which receives the query in lev's server-tool form,
// and the model gets the answer with its sources, and the run's usage counts the search's
// tokens. With a provider that has no web search, the tool answers that it is not
// available.
func TestWebSearchGated(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"content":[{"type":"web_search_tool_result","tool_use_id":"s1","content":[{"type":"web_search_result","url":"https://go.dev/","title":"The Go site","encrypted_content":"x"}]},{"type":"text","text":"Go is a language."}],"stop_reason":"end_turn","usage":{"input_tokens":40,"output_tokens":9}}`)
	}))
	defer up.Close()
	searching := func(c levconfig.Provider) (provider.Provider, error) {
		s, err := provider.LoadScripted(c.Script)
		if err != nil {
			return nil, err
		}
		return searchingProvider{s, &provider.Anthropic{BaseURL: up.URL, Client: up.Client()}}, nil
	}
	plain := func(c levconfig.Provider) (provider.Provider, error) {
		s, err := provider.LoadScripted(c.Script)
		return plainProvider{s}, err
	}
	answer := func(s string) string {
		return s + `
[[rule]]
stage = "one"
turn = 3
last_contains = "Go is a language."
text = "searched"

[[rule]]
stage = "one"
turn = 3
last_contains = "web_search is not available"
text = "no search"

[[rule]]
stage = "one"
turn = 3
text = "other"
`
	}
	tainted := strings.Replace(script("one", "web_search", `{"query": "{{last}}"}`), "turn = 3\ntext = \"done\"", "turn = 4\ntext = \"done\"", 1)
	clean := strings.Replace(tainted, "HOME/secret/key.txt", "readme.txt", 1)
	cases := []struct {
		name     string
		c        runCase
		want     want
		searches int
		output   string
	}{
		{"tainted query blocked", runCase{tools: []string{"read_file", "web_search"}, newProvider: searching, script: answer(tainted)},
			want{tool: "web_search", sources: []taint.Source{taint.SourceAutoBlock}, taint: taint.Private}, 0, ""},
		{"control: clean query searched", runCase{tools: []string{"read_file", "web_search"}, noGrant: true, newProvider: searching, script: answer(clean)},
			want{tool: "web_search", sources: []taint.Source{taint.SourceWithinClearance}, taint: taint.Internal}, 1, `"searched"`},
		{"provider without web search", runCase{tools: []string{"read_file", "web_search"}, noGrant: true, newProvider: plain, script: answer(clean)},
			want{tool: "web_search", sources: []taint.Source{taint.SourceWithinClearance}, taint: taint.Internal}, 0, `"no search"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			before := len(bodies)
			mu.Unlock()
			w := newWorld(t)
			tc.c.script = strings.ReplaceAll(tc.c.script, "HOME", w.home)
			o := w.run(t, tc.c)
			checkAudit(t, o.audit, tc.want)
			mu.Lock()
			got := append([]string(nil), bodies[before:]...)
			mu.Unlock()
			if len(got) != tc.searches {
				t.Fatalf("the search upstream got %d requests, want %d: %q", len(got), tc.searches, got)
			}
			for _, b := range got {
				if strings.Contains(b, secret) {
					t.Fatalf("the secret reached the search upstream: %s", b)
				}
				var req struct {
					Tools []map[string]any `json:"tools"`
				}
				json.Unmarshal([]byte(b), &req)
				if len(req.Tools) != 1 || req.Tools[0]["type"] != "web_search_20250305" || !strings.Contains(b, "public project notes") {
					t.Fatalf("search request %s: want lev's one server tool and the query", b)
				}
			}
			// (the tainted run's final answer is gated in turn, and the run fails: no output)
			if tc.output != "" && (len(o.rec.Stages) == 0 || string(o.rec.Stages[0].Output) != tc.output) {
				t.Fatalf("stage output %s, want %s (the model saw the tool's answer)", o.rec.Stages[0].Output, tc.output)
			}
			if tc.searches > 0 && (o.rec.Usage == nil || o.rec.Usage.InputTokens != 40 || o.rec.Usage.OutputTokens != 9 || o.rec.Usage.Calls != 1) {
				t.Fatalf("run usage %+v, want the search's 40/9 tokens in 1 call", o.rec.Usage)
			}
		})
	}
	if !strings.HasPrefix(pipeline.NotAvailable, "web_search is not available") {
		t.Fatalf("the scripted rule above matches the start of pipeline.NotAvailable: %q", pipeline.NotAvailable)
	}
}
