package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/toolcat"
)

// TestExternalToolOutputCapped: whatever an external tool hands back, its result's
// content or its error's message (an MCP server's JSON-RPC error carries the server's own
// words), reaches the model through Handle at most MaxResultBytes plus the truncation
// note, cut at a character's start. Controls: a small result and a small error pass whole.
func TestExternalToolOutputCapped(t *testing.T) {
	note := fmt.Sprintf("\n[truncated at %d bytes]", MaxResultBytes)
	big := strings.Repeat("e", 3<<20)
	// A 3-byte character straddling the cap: the cut goes before it, not through it.
	straddle := strings.Repeat("a", MaxResultBytes-1) + "€" + strings.Repeat("b", 10)
	for _, tc := range []struct {
		name    string
		res     *Result
		err     error
		want    string // the whole content, when it is short
		wantLen int    // else its length
		isError bool
	}{
		{"control: small result", &Result{Content: "fine"}, nil, "fine", 0, false},
		{"control: small error", nil, errors.New("server said no"), "server said no", 0, true},
		{"3 MiB result", &Result{Content: big}, nil, "", MaxResultBytes + len(note), false},
		{"3 MiB error", nil, errors.New(big), "", MaxResultBytes + len(note), true},
		{"3 MiB error flagged by the server", &Result{Content: big, IsError: true}, nil, "", MaxResultBytes + len(note), true},
		{"character at the cap", &Result{Content: straddle}, nil, "", MaxResultBytes - 1 + len(note), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := false
			tool, err := NewExternalTool("mcp__s__t", "test", toolcat.Local, json.RawMessage(`{"type":"object"}`), DefaultDeadline,
				func(context.Context, ObjectArgs) (*Result, error) { ran = true; return tc.res, tc.err })
			if err != nil {
				t.Fatal(err)
			}
			p := &Pipeline{Tools: map[string]*Tool{tool.Name: tool}, Gate: allowAll{},
				Perms: &Permissions{User: map[string]blueprint.Permission{tool.Name: blueprint.Allow}}}
			_, res := p.Handle(context.Background(), Stage{Name: "s", Tools: []string{tool.Name}}, provider.ToolCall{ID: "1", Name: tool.Name, Args: json.RawMessage(`{}`)})
			if !ran || res.Refusal != nil {
				t.Fatalf("the tool did not run: %+v", res)
			}
			if res.IsError != tc.isError {
				t.Errorf("is_error %v, want %v", res.IsError, tc.isError)
			}
			if tc.want != "" {
				if res.Content != tc.want {
					t.Fatalf("content %q, want %q", res.Content, tc.want)
				}
				return
			}
			if len(res.Content) != tc.wantLen || !strings.HasSuffix(res.Content, note) || !utf8.ValidString(res.Content) {
				t.Fatalf("content of %d bytes (valid UTF-8: %v), ends %q; want %d bytes ending %q",
					len(res.Content), utf8.ValidString(res.Content), res.Content[max(0, len(res.Content)-40):], tc.wantLen, note)
			}
		})
	}
}
