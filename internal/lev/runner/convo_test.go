package runner

import (
	"errors"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// fakeTurnGate records evictions; the real gate's side is taintgate's context tests.
type fakeTurnGate struct{ evicted []string }

func (g *fakeTurnGate) ObserveTurn(int, string, bool) {}
func (g *fakeTurnGate) EvictTurn(key string) bool {
	g.evicted = append(g.evicted, "turn "+key)
	return true
}
func (g *fakeTurnGate) Evict(id string) bool {
	g.evicted = append(g.evicted, "call "+id)
	return true
}
func (g *fakeTurnGate) EntryLevel(string, bool) (taint.Level, bool) { return taint.Internal, true }
func (g *fakeTurnGate) InputLevel(int) taint.Level                  { return taint.Internal }
func (g *fakeTurnGate) Level() taint.Level                          { return taint.Internal }

func convoFixture(save func() error) (*convo, *fakeTurnGate, *stageState) {
	g := &fakeTurnGate{}
	ss := &stageState{messages: []provider.Message{
		{Role: "user", Content: "task"},
		{Role: "assistant", Content: "reading", ToolCalls: []provider.ToolCall{{ID: "a", Name: "read_file", Args: []byte(`{"path":"k"}`)}}},
		{Role: "tool", ToolCallID: "a", Name: "read_file", Content: "SECRET"},
		{Role: "user", Content: "a note from lev"},
		{Role: "assistant", ToolCalls: []provider.ToolCall{{ID: "b", Name: "read_file", Args: []byte(`{"path":"k"}`)}}},
		{Role: "tool", ToolCallID: "b", Name: "read_file", Content: "SECRET"},
		{Role: "assistant", ToolCalls: []provider.ToolCall{{ID: "b", Name: "read_file", Args: []byte(`{"path":"k"}`)}}},
		{Role: "tool", ToolCallID: "b", Name: "read_file", Content: "SECRET"},
	}}
	c := &convo{gate: g}
	c.enter(0, ss, save)
	return c, g, ss
}

// TestConvoDrop: a drop is all or none, is written before any label is evicted, and a
// failed write leaves the conversation and the labels as they were.
func TestConvoDrop(t *testing.T) {
	cases := []struct {
		name    string
		ids     []string
		saveErr error
		err     string
		evicted string // the evictions, in order
	}{
		{"result and turn", []string{"m2", "m1"}, nil, "", "call a,turn m1"},
		{"the input", []string{"m2", "m0"}, nil, "m0 is the stage's input", ""},
		{"a note from lev", []string{"m3"}, nil, "m3 is a note from lev", ""},
		{"past the end", []string{"m2", "m8"}, nil, "no entry m8", ""},
		{"a call id used twice", []string{"m5"}, nil, `call id "b", which the model used more than once`, ""},
		{"the write fails", []string{"m2"}, errors.New("disk full"), "writing the conversation: disk full; nothing was dropped", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			saved := 0
			var g *fakeTurnGate
			c, gg, ss := convoFixture(func() error {
				saved++
				if len(g.evicted) > 0 {
					t.Error("a label was evicted before the conversation was written")
				}
				return tc.saveErr
			})
			g = gg
			before := append([]provider.Message(nil), ss.messages...)
			_, err := c.Drop(tc.ids)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				for i := range before {
					if ss.messages[i].Content != before[i].Content || argsOf(ss.messages[i]) != argsOf(before[i]) {
						t.Errorf("m%d changed by a failed drop: %+v", i, ss.messages[i])
					}
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(g.evicted, ","); got != tc.evicted {
				t.Errorf("evicted %q, want %q", got, tc.evicted)
			}
			if tc.err == "" {
				if saved != 1 || ss.messages[2].Content != DroppedContent || ss.messages[1].Content != DroppedContent || string(ss.messages[1].ToolCalls[0].Args) != "{}" {
					t.Errorf("saved %d, messages %+v", saved, ss.messages[:3])
				}
				if ss.messages[1].ToolCalls[0].ID != "a" {
					t.Error("the dropped turn's call id is gone: its result answers nothing")
				}
			}
		})
	}
}

func argsOf(m provider.Message) string {
	var b strings.Builder
	for _, tc := range m.ToolCalls {
		b.WriteString(tc.ID + string(tc.Args))
	}
	return b.String()
}
