package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lever-jail/lever/internal/lev/capread"
)

// Anthropic is an Anthropic Messages API client.
type Anthropic struct {
	BaseURL string // default https://api.anthropic.com
	APIKey  string
	Stream  bool
	Client  *http.Client
	// Retry is the retry policy for 429 and 5xx replies (529: overloaded); nil is
	// DefaultRetry.
	Retry *Retry
}

func (a *Anthropic) retrier() Retry {
	if a.Retry != nil {
		return *a.Retry
	}
	return DefaultRetry
}

// newRequest is a Messages POST with the API version and the key when lev has one.
func (a *Anthropic) newRequest(ctx context.Context, body []byte) (*http.Request, error) {
	hreq, err := newJSONPost(ctx, a.BaseURL, DefaultAnthropicBase, "/v1/messages", body)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("anthropic-version", "2023-06-01")
	if a.APIKey != "" {
		hreq.Header.Set("x-api-key", a.APIKey)
	}
	return hreq, nil
}

// anUsage is the Messages API's usage (in a reply, message_start and message_delta).
type anUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

func (u anUsage) usage() Usage {
	return Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CacheReadTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens, Calls: 1}
}

// DefaultAnthropicBase is the public endpoint.
const DefaultAnthropicBase = "https://api.anthropic.com"

type anBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

type anMessage struct {
	Role    string    `json:"role"`
	Content []anBlock `json:"content"`
}

type anTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anRequest struct {
	Model     string      `json:"model"`
	MaxTokens int         `json:"max_tokens"`
	System    string      `json:"system,omitempty"`
	Messages  []anMessage `json:"messages"`
	Tools     []anTool    `json:"tools,omitempty"`
	Stream    bool        `json:"stream,omitempty"`
}

type anResponse struct {
	Content    []anBlock `json:"content"`
	StopReason string    `json:"stop_reason"`
	Usage      anUsage   `json:"usage"`
	Error      *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (a *Anthropic) body(req *Request) ([]byte, error) {
	r := anRequest{Model: req.Model, MaxTokens: req.MaxTokens, System: req.System, Stream: a.Stream}
	if r.MaxTokens == 0 {
		r.MaxTokens = 4096
	}
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			r.System += "\n" + m.Content
		case "tool":
			b := anBlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: m.Content, IsError: m.IsError}
			// Consecutive tool results go back in one user turn.
			if n := len(r.Messages); n > 0 && r.Messages[n-1].Role == "user" && len(r.Messages[n-1].Content) > 0 && r.Messages[n-1].Content[0].Type == "tool_result" {
				r.Messages[n-1].Content = append(r.Messages[n-1].Content, b)
			} else {
				r.Messages = append(r.Messages, anMessage{Role: "user", Content: []anBlock{b}})
			}
		default:
			am := anMessage{Role: m.Role}
			if m.Content != "" {
				am.Content = append(am.Content, anBlock{Type: "text", Text: m.Content})
			}
			for _, tc := range m.ToolCalls {
				am.Content = append(am.Content, anBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: tc.Args})
			}
			r.Messages = append(r.Messages, am)
		}
	}
	for _, t := range req.Tools {
		r.Tools = append(r.Tools, anTool{Name: t.Name, Description: t.Description, InputSchema: t.Schema})
	}
	return json.Marshal(r)
}

// Complete sends one Messages request.
func (a *Anthropic) Complete(ctx context.Context, req *Request) (*Response, error) {
	body, err := a.body(req)
	if err != nil {
		return nil, err
	}
	hreq, err := a.newRequest(ctx, body)
	if err != nil {
		return nil, err
	}
	var r anResponse
	streamed, _, err := exchange(ctx, a.retrier(), a.Client, "anthropic", hreq, a.Stream, a.readStream, &r)
	if err != nil || streamed != nil {
		return streamed, err
	}
	if r.Error != nil {
		return nil, fmt.Errorf("anthropic: %s", r.Error.Message)
	}
	out := &Response{Stop: r.StopReason, Usage: r.Usage.usage()}
	var text strings.Builder
	for _, b := range r.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := b.Input
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Args: args})
		}
	}
	out.Text = text.String()
	return out, nil
}

type anStreamEvent struct {
	Type         string  `json:"type"`
	Index        int     `json:"index"`
	ContentBlock anBlock `json:"content_block"`
	Delta        struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	// message_start carries the input's usage; message_delta the output tokens so far.
	Message struct {
		Usage anUsage `json:"usage"`
	} `json:"message"`
	Usage *anUsage `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (a *Anthropic) readStream(resp *http.Response) (*Response, error) {
	defer resp.Body.Close()
	peer := capread.Peer(resp)
	sse := capread.NewSSE(resp.Body, peer)
	type block struct {
		typ, id, name string
		text, args    strings.Builder
	}
	blocks := map[int]*block{}
	var order []int
	out := &Response{}
	total := 0
	for {
		ev, err := sse.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("anthropic: %w", err)
		}
		if total += len(ev.Data); total > capread.BodyCap {
			return nil, fmt.Errorf("anthropic: %w", &capread.CapError{What: "response body", Cap: capread.BodyCap, Peer: peer})
		}
		var e anStreamEvent
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			return nil, fmt.Errorf("anthropic: decoding stream frame from %s: %w", peer, err)
		}
		switch e.Type {
		case "error":
			if e.Error != nil {
				return nil, fmt.Errorf("anthropic: %s", e.Error.Message)
			}
			return nil, fmt.Errorf("anthropic: stream error from %s", peer)
		case "content_block_start":
			if len(blocks) > 1024 {
				return nil, fmt.Errorf("anthropic: stream from %s: too many content blocks", peer)
			}
			b := &block{typ: e.ContentBlock.Type, id: e.ContentBlock.ID, name: e.ContentBlock.Name}
			b.text.WriteString(e.ContentBlock.Text)
			if _, ok := blocks[e.Index]; !ok {
				order = append(order, e.Index)
			}
			blocks[e.Index] = b
		case "content_block_delta":
			b := blocks[e.Index]
			if b == nil {
				continue
			}
			b.text.WriteString(e.Delta.Text)
			b.args.WriteString(e.Delta.PartialJSON)
		case "message_start":
			out.Usage = e.Message.Usage.usage()
		case "message_delta":
			if e.Delta.StopReason != "" {
				out.Stop = e.Delta.StopReason
			}
			if e.Usage != nil {
				// cumulative: the last delta's count is the reply's
				out.Usage.OutputTokens = e.Usage.OutputTokens
				out.Usage.Calls = 1
			}
		case "message_stop":
			goto done
		}
	}
done:
	var text strings.Builder
	for _, i := range order {
		b := blocks[i]
		switch b.typ {
		case "text":
			text.WriteString(b.text.String())
		case "tool_use":
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: b.id, Name: b.name, Args: normArgs(b.args.String())})
		}
	}
	out.Text = text.String()
	return out, nil
}
