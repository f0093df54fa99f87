package runner

// The running stage's conversation as the context tools see it (pipeline.Conversation):
// context_list names its messages, context_drop removes some of them from every later
// turn, and the taint gate evicts their labels, so the run's taint is recomputed from
// what is still in the conversation.

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// DroppedContent is what a dropped message holds from then on.
const DroppedContent = "[dropped by context_drop]"

// turnGate is the part of the taint gate the conversation needs (taintgate.Gate has it);
// with a gate that lacks it, nothing can be dropped.
type turnGate interface {
	ObserveTurn(stage int, key string, public bool)
	EvictTurn(key string) bool
	Evict(callID string) bool
	EntryLevel(key string, turn bool) (taint.Level, bool)
	InputLevel(stage int) taint.Level
	Level() taint.Level
}

// convo is one run's view of its running stage's conversation.
type convo struct {
	mu    sync.Mutex
	stage int
	ss    *stageState
	gate  turnGate // nil: the gate cannot evict, so nothing may be dropped
	// save writes the stage's messages.json: a drop is on disk before the gate lowers the
	// taint, so a crash cannot leave a resumed run with the dropped bytes and a low label.
	save func() error
}

func newConvo(g pipeline.Gate) *convo {
	c := &convo{}
	if tg, ok := g.(turnGate); ok {
		c.gate = tg
	}
	return c
}

func (c *convo) enter(stage int, ss *stageState, save func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stage, c.ss, c.save = stage, ss, save
}

func msgID(i int) string { return "m" + strconv.Itoa(i) }

// observeTurn labels the model turn just appended to the conversation.
func (c *convo) observeTurn() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gate == nil || c.ss == nil {
		return
	}
	i := len(c.ss.messages) - 1
	m := c.ss.messages[i]
	c.gate.ObserveTurn(c.stage, msgID(i), contextOnly(m))
}

// contextOnly: a turn with no text whose calls are all context tools with well-formed
// arguments holds nothing but runtime-assigned ids.
func contextOnly(m provider.Message) bool {
	if m.Content != "" || len(m.ToolCalls) == 0 {
		return false
	}
	for _, tc := range m.ToolCalls {
		if !pipeline.ContextOnly(tc.Name, tc.Args) {
			return false
		}
	}
	return true
}

func dropped(m provider.Message) bool { return m.Content == DroppedContent }

// List is context_list's view.
func (c *convo) List() []pipeline.ContextEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ss == nil {
		return nil
	}
	var out []pipeline.ContextEntry
	for i, m := range c.ss.messages {
		e := pipeline.ContextEntry{ID: msgID(i), Dropped: dropped(m)}
		var l taint.Level
		var known bool
		switch {
		case i == 0:
			e.Kind = "input (the stage's task; cannot be dropped)"
			if c.gate != nil {
				l, known = c.gate.InputLevel(c.stage), true
			}
		case m.Role == "assistant":
			e.Kind = "assistant turn"
			if c.gate != nil {
				l, known = c.gate.EntryLevel(msgID(i), true)
			}
		case m.Role == "tool":
			e.Kind = m.Name + " result"
			if c.gate != nil && c.uniqueCall(m.ToolCallID) {
				l, known = c.gate.EntryLevel(m.ToolCallID, false)
			}
		default:
			e.Kind = "note from lev (cannot be dropped)"
		}
		if known {
			e.Label = l.String()
		}
		out = append(out, e)
	}
	return out
}

// uniqueCall: exactly one tool message of the stage answers callID. The gate keys a
// result's label by call id; a model that reuses an id leaves the older entry unreachable
// (it stays, so the taint stays), and neither message may be dropped, since the label
// evicted could be the other one's.
func (c *convo) uniqueCall(callID string) bool {
	n := 0
	for _, m := range c.ss.messages {
		if m.Role == "tool" && m.ToolCallID == callID {
			n++
		}
	}
	return n == 1
}

// Drop removes the messages named (all or none) from the conversation, writes it, then
// evicts their labels; after is the context's label then.
func (c *convo) Drop(ids []string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ss == nil {
		return "", errors.New("context_drop: no stage is running")
	}
	if c.gate == nil {
		return "", errors.New("context_drop: this run's taint gate cannot evict entries, so nothing may be dropped")
	}
	idx := make([]int, 0, len(ids))
	for _, id := range ids {
		i, err := strconv.Atoi(id[1:])
		if err != nil || i >= len(c.ss.messages) {
			return "", fmt.Errorf("context_drop: no entry %s (context_list names them); nothing was dropped", id)
		}
		m := c.ss.messages[i]
		switch {
		case i == 0:
			return "", fmt.Errorf("context_drop: %s is the stage's input; it cannot be dropped; nothing was dropped", id)
		case dropped(m):
			return "", fmt.Errorf("context_drop: %s was dropped already; nothing was dropped", id)
		case m.Role == "tool" && !c.uniqueCall(m.ToolCallID):
			return "", fmt.Errorf("context_drop: %s answers call id %q, which the model used more than once; it cannot be dropped; nothing was dropped", id, m.ToolCallID)
		case m.Role != "tool" && m.Role != "assistant":
			return "", fmt.Errorf("context_drop: %s is a note from lev; it cannot be dropped; nothing was dropped", id)
		}
		idx = append(idx, i)
	}
	old := make([]provider.Message, len(idx))
	for k, i := range idx {
		old[k] = c.ss.messages[i]
		m := c.ss.messages[i]
		m.Content, m.IsError = DroppedContent, false
		if len(m.ToolCalls) > 0 {
			// The calls stay (each result still answers one), their arguments do not: the
			// model wrote them too.
			calls := make([]provider.ToolCall, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				calls[j] = provider.ToolCall{ID: tc.ID, Name: tc.Name, Args: []byte(`{}`)}
			}
			m.ToolCalls = calls
		}
		c.ss.messages[i] = m
	}
	if c.save != nil {
		if err := c.save(); err != nil {
			for k, i := range idx {
				c.ss.messages[i] = old[k]
			}
			return "", fmt.Errorf("context_drop: writing the conversation: %w; nothing was dropped", err)
		}
	}
	for k, i := range idx {
		if old[k].Role == "tool" {
			c.gate.Evict(old[k].ToolCallID)
		} else {
			c.gate.EvictTurn(msgID(i))
		}
	}
	return c.gate.Level().String(), nil
}

var _ pipeline.Conversation = (*convo)(nil)
