package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/lever-jail/lever/internal/lev/capread"
)

// Searcher is a provider that can run a web search on its own side (a server tool the
// model's upstream executes): lev's web_search tool asks it. The search runs as one extra
// model call through the same endpoint (through lever, the broker, whose body policy
// allows exactly these two server tools in exactly these forms: AnthropicWebSearchTool
// and OpenAIWebSearchTool).
type Searcher interface {
	Search(ctx context.Context, req *SearchRequest) (*SearchResult, error)
}

// SearchRequest is one web search.
type SearchRequest struct {
	Model string
	Query string
}

// SearchResult is what a search found: the model's summary and the pages it cites.
type SearchResult struct {
	Text    string
	Sources []Source
	Usage   Usage
}

// Source is one page a search result cites.
type Source struct {
	Title string `json:"title,omitempty" toml:"title"`
	URL   string `json:"url" toml:"url"`
}

// ErrSearchUnavailable is a provider that has no web search: the tool says so rather
// than fail obscurely.
var ErrSearchUnavailable = errors.New("web_search is not available with this provider")

// SearchMaxUses bounds the searches the upstream runs for one web_search call.
const SearchMaxUses = 3

// AnthropicWebSearchTool is the one Anthropic server tool lev declares, exactly as it
// declares it (the broker's body policy allows this type with these keys and nothing
// else).
func AnthropicWebSearchTool() map[string]any {
	return map[string]any{"type": "web_search_20250305", "name": "web_search", "max_uses": SearchMaxUses}
}

// OpenAIWebSearchTool is OpenAI's Responses API web search tool as lev declares it: with
// external_web_access false the upstream answers from its search index and cache and
// fetches no live page, so a URL the jail names is never requested on its behalf (the
// broker's body policy requires the field, false).
func OpenAIWebSearchTool() map[string]any {
	return map[string]any{"type": "web_search", "external_web_access": false}
}

func searchPrompt(q string) string {
	return "Search the web for the following query and answer with what you find, citing your sources.\n\nQuery: " + q
}

func checkQuery(q string) error {
	if strings.TrimSpace(q) == "" {
		return errors.New(`web_search: argument "query" is required`)
	}
	return nil
}

// Format renders a result for the model: the text, then the sources, one a line.
func (r *SearchResult) Format() string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(r.Text))
	if len(r.Sources) > 0 {
		b.WriteString("\n\nSources:\n")
		seen := map[string]bool{}
		for _, s := range r.Sources {
			if seen[s.URL] {
				continue
			}
			seen[s.URL] = true
			if s.Title != "" {
				fmt.Fprintf(&b, "- %s <%s>\n", s.Title, s.URL)
			} else {
				fmt.Fprintf(&b, "- <%s>\n", s.URL)
			}
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// --- Anthropic ---

type anSearchRequest struct {
	Model     string           `json:"model"`
	MaxTokens int              `json:"max_tokens"`
	Messages  []anMessage      `json:"messages"`
	Tools     []map[string]any `json:"tools"`
}

type anSearchBlock struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Citations []struct {
		URL   string `json:"url"`
		Title string `json:"title"`
	} `json:"citations"`
	// web_search_tool_result: a list of results, or an error object
	Content json.RawMessage `json:"content"`
}

type anSearchResponse struct {
	Content []anSearchBlock `json:"content"`
	Usage   anUsage         `json:"usage"`
	Error   *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Search runs Anthropic's web search server tool in one Messages call.
func (a *Anthropic) Search(ctx context.Context, req *SearchRequest) (*SearchResult, error) {
	if err := checkQuery(req.Query); err != nil {
		return nil, err
	}
	body, err := json.Marshal(anSearchRequest{Model: req.Model, MaxTokens: 4096,
		Messages: []anMessage{{Role: "user", Content: []anBlock{{Type: "text", Text: searchPrompt(req.Query)}}}},
		Tools:    []map[string]any{AnthropicWebSearchTool()}})
	if err != nil {
		return nil, err
	}
	hreq, err := a.newRequest(ctx, body)
	if err != nil {
		return nil, err
	}
	var r anSearchResponse
	resp, err := a.retrier().do(ctx, a.Client, "anthropic", hreq)
	if err != nil {
		return nil, err
	}
	if err := decodeBody("anthropic", resp, &r); err != nil {
		return nil, err
	}
	if r.Error != nil {
		return nil, fmt.Errorf("anthropic: %s", r.Error.Message)
	}
	out := &SearchResult{Usage: r.Usage.usage()}
	var text strings.Builder
	for _, b := range r.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
			for _, c := range b.Citations {
				if c.URL != "" {
					out.Sources = append(out.Sources, Source{Title: c.Title, URL: c.URL})
				}
			}
		case "web_search_tool_result":
			var results []struct {
				Type  string `json:"type"`
				URL   string `json:"url"`
				Title string `json:"title"`
			}
			if json.Unmarshal(b.Content, &results) == nil {
				for _, x := range results {
					if x.Type == "web_search_result" && x.URL != "" {
						out.Sources = append(out.Sources, Source{Title: x.Title, URL: x.URL})
					}
				}
				continue
			}
			var e struct {
				ErrorCode string `json:"error_code"`
			}
			if json.Unmarshal(b.Content, &e) == nil && e.ErrorCode != "" {
				return nil, fmt.Errorf("anthropic: web search failed upstream: %s", e.ErrorCode)
			}
		}
	}
	out.Text = text.String()
	return out, nil
}

// --- OpenAI (Responses API) ---

type oaSearchRequest struct {
	Model string           `json:"model"`
	Input string           `json:"input"`
	Tools []map[string]any `json:"tools"`
}

type oaSearchResponse struct {
	Output []struct {
		Type    string `json:"type"`
		Content []struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			Annotations []struct {
				Type  string `json:"type"`
				URL   string `json:"url"`
				Title string `json:"title"`
			} `json:"annotations"`
		} `json:"content"`
	} `json:"output"`
	Usage *oaRespUsage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Search runs OpenAI's web search tool in one Responses API call. An OpenAI-compatible
// endpoint without the Responses API (most local servers) answers 404: the tool then says
// web search is not available there.
func (o *OpenAI) Search(ctx context.Context, req *SearchRequest) (*SearchResult, error) {
	if err := checkQuery(req.Query); err != nil {
		return nil, err
	}
	body, err := json.Marshal(oaSearchRequest{Model: req.Model, Input: searchPrompt(req.Query), Tools: []map[string]any{OpenAIWebSearchTool()}})
	if err != nil {
		return nil, err
	}
	hreq, err := o.newRequest(ctx, "/responses", body, false)
	if err != nil {
		return nil, err
	}
	resp, err := o.retrier().do(ctx, o.Client, "openai", hreq)
	var se *StatusError
	if errors.As(err, &se) && (se.Code == 404 || se.Code == 405) {
		return nil, fmt.Errorf("%w: the endpoint has no Responses API (%v)", ErrSearchUnavailable, err)
	}
	if err != nil {
		return nil, err
	}
	var r oaSearchResponse
	if err := decodeBody("openai", resp, &r); err != nil {
		return nil, err
	}
	if r.Error != nil {
		return nil, fmt.Errorf("openai: %s", r.Error.Message)
	}
	out := &SearchResult{}
	if r.Usage != nil {
		out.Usage = r.Usage.usage()
	}
	var text strings.Builder
	for _, item := range r.Output {
		if item.Type != "message" {
			continue
		}
		for _, c := range item.Content {
			if c.Type != "output_text" {
				continue
			}
			text.WriteString(c.Text)
			for _, a := range c.Annotations {
				if a.Type == "url_citation" && a.URL != "" {
					out.Sources = append(out.Sources, Source{Title: a.Title, URL: a.URL})
				}
			}
		}
	}
	out.Text = text.String()
	return out, nil
}

// decodeBody reads a 2xx reply under the cap and decodes it.
func decodeBody(who string, resp *http.Response, into any) error {
	data, err := capread.Body(resp)
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	if err := json.Unmarshal(data, into); err != nil {
		return fmt.Errorf("%s: decoding reply from %s: %w", who, capread.Peer(resp), err)
	}
	return nil
}
