// Package provider talks to models: an OpenAI-compatible chat-completions client, an
// Anthropic Messages client, and a scripted provider for offline runs and tests. Every
// remote reply is read through capread's fixed caps.
//
// It owns the model APIs' wire formats. It must not run tools or know their permissions
// (tool calls go back to the runner, which puts each through the pipeline), and must not
// read a reply except through capread.
package provider

import (
	"context"
	"encoding/json"
)

// Message is one conversation turn in lev's neutral form.
type Message struct {
	Role       string     `json:"role"` // system | user | assistant | tool
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"` // tool name, on role=tool
	IsError    bool       `json:"is_error,omitempty"`
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID   string          `json:"id"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// ToolSpec offers a tool to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"` // JSON Schema of the arguments
}

// Request is one model call.
type Request struct {
	Model     string
	System    string
	Messages  []Message
	Tools     []ToolSpec
	MaxTokens int
	// Stage is the running stage's name; the scripted provider matches on it.
	Stage string
}

// Response is the model's turn.
type Response struct {
	Text      string
	ToolCalls []ToolCall
	Stop      string
	// Usage is the tokens the upstream reported for this call (zero when it reports
	// none: the scripted provider, a stream without a usage frame).
	Usage Usage
}

// Usage counts tokens as the upstream reports them. A run sums its calls' (run.json's
// "usage", lev ps --json).
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CacheReadTokens and CacheWriteTokens are the prompt tokens read from and written to
	// the upstream's prompt cache (Anthropic's cache_read/cache_creation_input_tokens,
	// OpenAI's cached_tokens), when it says.
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	// Calls is how many model calls the counts add up (web_search's own calls included).
	Calls int64 `json:"calls"`
}

// Add adds u's counts to the receiver's.
func (s *Usage) Add(u Usage) {
	s.InputTokens += u.InputTokens
	s.OutputTokens += u.OutputTokens
	s.CacheReadTokens += u.CacheReadTokens
	s.CacheWriteTokens += u.CacheWriteTokens
	s.Calls += u.Calls
}

// Provider is a model endpoint.
type Provider interface {
	Complete(ctx context.Context, req *Request) (*Response, error)
}
