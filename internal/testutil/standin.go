package testutil

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Step is one model turn of a scripted stand-in: the tool call it answers with.
type Step struct {
	Tool string
	Args any
}

// StandIn is an OpenAI-compatible chat-completions upstream that plays a fixed script:
// the Nth request (counted by the tool results already in the conversation) gets Steps[N]
// as its one tool call. Tests put it behind the broker's /llm/ route, so every request it
// sees has crossed the jail's firewall and the broker; it records what it saw.
type StandIn struct {
	Steps []Step
	// Hold, when set, is called before answering turn n (0-based); a test blocks in it to
	// prove progress reaches the host while the run is still going.
	Hold func(n int)

	mu       sync.Mutex
	Auth     []string
	Requests int
	// ToolResults are the tool messages' contents, in order, as the model received them.
	ToolResults []string
}

type chatReq struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// ServeHTTP answers one chat completion.
func (s *StandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	var req chatReq
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	n := 0
	var results []string
	for _, m := range req.Messages {
		if m.Role == "tool" {
			n++
			var s string
			if json.Unmarshal(m.Content, &s) != nil {
				s = string(m.Content)
			}
			results = append(results, s)
		}
	}
	s.mu.Lock()
	s.Requests++
	s.Auth = append(s.Auth, r.Header.Get("Authorization"))
	s.ToolResults = results
	s.mu.Unlock()
	if s.Hold != nil {
		s.Hold(n)
	}
	if n >= len(s.Steps) {
		http.Error(w, fmt.Sprintf("stand-in: turn %d is past the script's %d steps", n, len(s.Steps)), http.StatusBadRequest)
		return
	}
	args, _ := json.Marshal(s.Steps[n].Args)
	resp := map[string]any{
		"id": fmt.Sprintf("c%d", n), "object": "chat.completion", "model": "stand-in",
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "tool_calls",
			"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": fmt.Sprintf("call_%d", n), "type": "function",
				"function": map[string]any{"name": s.Steps[n].Tool, "arguments": string(args)},
			}}},
		}},
		"usage": map[string]int{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// Seen returns a copy of what the stand-in recorded.
func (s *StandIn) Seen() (requests int, auth, toolResults []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Requests, append([]string(nil), s.Auth...), append([]string(nil), s.ToolResults...)
}
