package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/lever-jail/lever/internal/lev/tomlx"
)

// Scripted answers from the request's contents, with no network: the first rule whose
// conditions all hold gives the reply. It makes runs reproducible offline and in tests.
//
// A rules file (TOML):
//
//	[[rule]]
//	stage = "work"               # optional: only in this stage
//	turn = 1                     # optional: the Nth model turn of the stage (1-based)
//	last_contains = "hello"      # optional: the last message's text contains this
//	text = "some reply"          # optional
//	[[rule.call]]
//	tool = "read_file"
//	args = '{"path": "notes.txt"}'  # {{last}} = the last message's text, JSON-escaped
//
// Web search (lev's web_search tool) answers from [[search]] rules; a file with none is a
// provider without web search:
//
//	[[search]]
//	query_contains = "golang"    # optional
//	text = "Go is ..."
//	[[search.source]]
//	title = "The Go site"
//	url = "https://go.dev/"
type Scripted struct {
	Rules    []Rule       `toml:"rule"`
	Searches []SearchRule `toml:"search"`
	n        atomic.Int64
}

// SearchRule is one scripted web search answer.
type SearchRule struct {
	QueryContains string   `toml:"query_contains"`
	Text          string   `toml:"text"`
	Sources       []Source `toml:"source"`
}

// Search answers from the first [[search]] rule whose query_contains the query holds.
func (s *Scripted) Search(ctx context.Context, req *SearchRequest) (*SearchResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkQuery(req.Query); err != nil {
		return nil, err
	}
	if len(s.Searches) == 0 {
		return nil, fmt.Errorf("%w: the provider script has no [[search]] rules", ErrSearchUnavailable)
	}
	for _, r := range s.Searches {
		if strings.Contains(req.Query, r.QueryContains) {
			return &SearchResult{Text: r.Text, Sources: append([]Source(nil), r.Sources...)}, nil
		}
	}
	return nil, fmt.Errorf("scripted: no [[search]] rule matches query %q", req.Query)
}

// Rule is one scripted reply.
type Rule struct {
	Stage        string       `toml:"stage"`
	Turn         int          `toml:"turn"`
	LastContains string       `toml:"last_contains"`
	Text         string       `toml:"text"`
	Calls        []ScriptCall `toml:"call"`
}

// ScriptCall is one tool call a rule makes.
type ScriptCall struct {
	Tool string `toml:"tool"`
	Args string `toml:"args"`
}

// LoadScripted reads a rules file.
func LoadScripted(file string) (*Scripted, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading provider script: %w", err)
	}
	s := &Scripted{}
	doc, err := tomlx.Decode(file, data, s)
	if err != nil {
		return nil, err
	}
	for i, r := range s.Searches {
		for j, src := range r.Sources {
			if src.URL == "" {
				return nil, doc.Errorf("search.source.url", "search %d source %d: url is required", i+1, j+1)
			}
		}
	}
	for i, r := range s.Rules {
		for j, c := range r.Calls {
			if c.Tool == "" {
				return nil, doc.Errorf("rule.call.tool", "rule %d call %d: tool is required", i+1, j+1)
			}
		}
	}
	return s, nil
}

// Complete finds the first matching rule.
func (s *Scripted) Complete(ctx context.Context, req *Request) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	turn := 1
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			turn++
		}
	}
	last := ""
	if n := len(req.Messages); n > 0 {
		last = req.Messages[n-1].Content
	}
	for _, r := range s.Rules {
		if r.Stage != "" && r.Stage != req.Stage {
			continue
		}
		if r.Turn != 0 && r.Turn != turn {
			continue
		}
		if r.LastContains != "" && !strings.Contains(last, r.LastContains) {
			continue
		}
		out := &Response{Text: r.Text, Stop: "end_turn"}
		for _, c := range r.Calls {
			args := c.Args
			if args == "" {
				args = "{}"
			}
			esc, _ := json.Marshal(last)
			args = strings.ReplaceAll(args, "{{last}}", string(esc[1:len(esc)-1]))
			if !json.Valid([]byte(args)) {
				return nil, fmt.Errorf("scripted: rule for %s: args are not JSON: %s", c.Tool, args)
			}
			id := "call_" + strconv.FormatInt(s.n.Add(1), 10)
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: id, Name: c.Tool, Args: json.RawMessage(args)})
		}
		if len(out.ToolCalls) > 0 {
			out.Stop = "tool_use"
		}
		return out, nil
	}
	return nil, fmt.Errorf("scripted: no rule matches stage %q turn %d", req.Stage, turn)
}
