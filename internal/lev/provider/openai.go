package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lever-jail/lever/internal/lev/capread"
)

// OpenAI is an OpenAI-compatible chat-completions client. BaseURL includes the version
// path (https://api.openai.com/v1); through lever it is the broker's /llm/ route, and with
// no APIKey no Authorization header is sent (the broker adds the key on the host).
type OpenAI struct {
	BaseURL string
	APIKey  string
	Stream  bool
	Client  *http.Client
	// Retry is the retry policy for 429 and 5xx replies; nil is DefaultRetry.
	Retry *Retry
}

func (o *OpenAI) retrier() Retry {
	if o.Retry != nil {
		return *o.Retry
	}
	return DefaultRetry
}

// newRequest is a JSON POST to the base URL + path, with the key when lev has one.
func (o *OpenAI) newRequest(ctx context.Context, path string, body []byte, stream bool) (*http.Request, error) {
	hreq, err := newJSONPost(ctx, o.BaseURL, DefaultOpenAIBase, path, body)
	if err != nil {
		return nil, err
	}
	if o.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+o.APIKey)
	}
	if stream {
		hreq.Header.Set("Accept", "text/event-stream")
	}
	return hreq, nil
}

// DefaultOpenAIBase is the public endpoint.
const DefaultOpenAIBase = "https://api.openai.com/v1"

type oaMessage struct {
	Role       string       `json:"role"`
	Content    *string      `json:"content"`
	ToolCalls  []oaToolCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

type oaToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type oaTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type oaRequest struct {
	Model         string           `json:"model"`
	Messages      []oaMessage      `json:"messages"`
	Tools         []oaTool         `json:"tools,omitempty"`
	Stream        bool             `json:"stream,omitempty"`
	StreamOptions *oaStreamOptions `json:"stream_options,omitempty"`
	MaxTokens     int              `json:"max_tokens,omitempty"`
}

// oaStreamOptions: include_usage makes a stream end with a frame carrying the usage.
type oaStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// oaUsage is chat completions' usage.
type oaUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *oaUsage) usage() Usage {
	out := Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, Calls: 1}
	if u.PromptTokensDetails != nil {
		out.CacheReadTokens = u.PromptTokensDetails.CachedTokens
	}
	return out
}

// oaRespUsage is the Responses API's usage.
type oaRespUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

func (u *oaRespUsage) usage() Usage {
	out := Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, Calls: 1}
	if u.InputTokensDetails != nil {
		out.CacheReadTokens = u.InputTokensDetails.CachedTokens
	}
	return out
}

type oaChoice struct {
	Message      oaMessage `json:"message"`
	Delta        oaMessage `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
}

type oaResponse struct {
	Choices []oaChoice `json:"choices"`
	Usage   *oaUsage   `json:"usage"`
	Error   *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func str(s string) *string { return &s }

func (o *OpenAI) body(req *Request) ([]byte, error) {
	r := oaRequest{Model: req.Model, Stream: o.Stream, MaxTokens: req.MaxTokens}
	if o.Stream {
		r.StreamOptions = &oaStreamOptions{IncludeUsage: true}
	}
	if req.System != "" {
		r.Messages = append(r.Messages, oaMessage{Role: "system", Content: str(req.System)})
	}
	for _, m := range req.Messages {
		om := oaMessage{Role: m.Role, ToolCallID: m.ToolCallID}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			om.Content = str(m.Content)
		}
		for _, tc := range m.ToolCalls {
			var c oaToolCall
			c.ID, c.Type = tc.ID, "function"
			c.Function.Name, c.Function.Arguments = tc.Name, string(tc.Args)
			om.ToolCalls = append(om.ToolCalls, c)
		}
		r.Messages = append(r.Messages, om)
	}
	for _, t := range req.Tools {
		var ot oaTool
		ot.Type = "function"
		ot.Function.Name, ot.Function.Description, ot.Function.Parameters = t.Name, t.Description, t.Schema
		r.Tools = append(r.Tools, ot)
	}
	return json.Marshal(r)
}

// Complete sends one chat-completions request.
func (o *OpenAI) Complete(ctx context.Context, req *Request) (*Response, error) {
	body, err := o.body(req)
	if err != nil {
		return nil, err
	}
	hreq, err := o.newRequest(ctx, "/chat/completions", body, o.Stream)
	if err != nil {
		return nil, err
	}
	var r oaResponse
	streamed, resp, err := exchange(ctx, o.retrier(), o.Client, "openai", hreq, o.Stream, o.readStream, &r)
	if err != nil || streamed != nil {
		return streamed, err
	}
	if r.Error != nil {
		return nil, fmt.Errorf("openai: %s", r.Error.Message)
	}
	if len(r.Choices) == 0 {
		return nil, fmt.Errorf("openai: reply from %s has no choices", capread.Peer(resp))
	}
	c := r.Choices[0]
	out := &Response{}
	if r.Usage != nil {
		out.Usage = r.Usage.usage()
	}
	if c.Message.Content != nil {
		out.Text = *c.Message.Content
	}
	if c.FinishReason != nil {
		out.Stop = *c.FinishReason
	}
	for _, tc := range c.Message.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Args: normArgs(tc.Function.Arguments)})
	}
	return out, nil
}

func (o *OpenAI) readStream(resp *http.Response) (*Response, error) {
	defer resp.Body.Close()
	peer := capread.Peer(resp)
	sse := capread.NewSSE(resp.Body, peer)
	out := &Response{}
	var text strings.Builder
	type partial struct {
		id, name string
		args     strings.Builder
	}
	var calls []*partial
	total := 0
	for {
		ev, err := sse.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("openai: %w", err)
		}
		if string(ev.Data) == "[DONE]" {
			break
		}
		// Frames are capped one by one; the reply they add up to is capped like a body.
		if total += len(ev.Data); total > capread.BodyCap {
			return nil, fmt.Errorf("openai: %w", &capread.CapError{What: "response body", Cap: capread.BodyCap, Peer: peer})
		}
		var r oaResponse
		if err := json.Unmarshal(ev.Data, &r); err != nil {
			return nil, fmt.Errorf("openai: decoding stream frame from %s: %w", peer, err)
		}
		if r.Error != nil {
			return nil, fmt.Errorf("openai: %s", r.Error.Message)
		}
		if r.Usage != nil {
			out.Usage = r.Usage.usage()
		}
		for _, c := range r.Choices {
			if c.Delta.Content != nil {
				text.WriteString(*c.Delta.Content)
			}
			if c.FinishReason != nil {
				out.Stop = *c.FinishReason
			}
			for _, tc := range c.Delta.ToolCalls {
				i := len(calls)
				if tc.Index != nil {
					i = *tc.Index
				}
				if i < 0 || i > 1024 {
					return nil, fmt.Errorf("openai: stream from %s: bad tool call index %d", peer, i)
				}
				for len(calls) <= i {
					calls = append(calls, &partial{})
				}
				p := calls[i]
				if tc.ID != "" {
					p.id = tc.ID
				}
				if tc.Function.Name != "" {
					p.name = tc.Function.Name
				}
				p.args.WriteString(tc.Function.Arguments)
			}
		}
	}
	out.Text = text.String()
	for _, p := range calls {
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: p.id, Name: p.name, Args: normArgs(p.args.String())})
	}
	return out, nil
}

func normArgs(s string) json.RawMessage {
	if strings.TrimSpace(s) == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(s)
}

// newJSONPost builds a JSON POST to base (or def when base is empty) + path.
func newJSONPost(ctx context.Context, base, def, path string, body []byte) (*http.Request, error) {
	if base == "" {
		base = def
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	return hreq, nil
}

// exchange sends hreq. An SSE reply (when a stream was asked for) goes to stream; any other
// 2xx body is read under the 64 MiB cap and decoded into into. who prefixes every error.
// 429 and 5xx replies are retried by rt before anything is read.
func exchange(ctx context.Context, rt Retry, c *http.Client, who string, hreq *http.Request, wantStream bool, stream func(*http.Response) (*Response, error), into any) (*Response, *http.Response, error) {
	resp, err := rt.do(ctx, c, who, hreq)
	if err != nil {
		return nil, nil, err
	}
	if wantStream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		r, err := stream(resp)
		return r, resp, err
	}
	data, err := capread.Body(resp)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", who, err)
	}
	if err := json.Unmarshal(data, into); err != nil {
		return nil, nil, fmt.Errorf("%s: decoding reply from %s: %w", who, capread.Peer(resp), err)
	}
	return nil, resp, nil
}
