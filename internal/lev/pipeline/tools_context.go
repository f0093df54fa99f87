package pipeline

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// --- context tools ---
//
// context_list shows what the running stage's conversation holds, one entry per message,
// with the id context_drop takes and the taint label the runtime gave it; context_drop
// removes entries from every later turn. The conversation is the runner's (Conversation);
// the taint it carries is the gate's: dropping an entry evicts its label, so the run's
// taint falls when, and only when, nothing still in the conversation carries it.

// ContextEntry is one message of the running stage's conversation.
type ContextEntry struct {
	ID      string // m<index>
	Kind    string // "input", "assistant turn", "<tool> result", "note"
	Label   string // the taint label, when the gate knows it
	Dropped bool
}

// Conversation is the running stage's conversation, as the context tools see it. The
// runner provides it (Pipeline.Context).
type Conversation interface {
	List() []ContextEntry
	// Drop removes the entries named (all or none) and reports the context's label after.
	Drop(ids []string) (after string, err error)
}

// MaxDropIDs bounds the ids of one context_drop call.
const MaxDropIDs = 64

// contextIDRe is the one form of an entry id: the runtime assigns them, so an id carries
// nothing but a message's position.
var contextIDRe = regexp.MustCompile(`^m[0-9]{1,6}$`)

type contextDropArgs struct {
	IDs []string `json:"ids" schema:"required"`
}

func (a contextDropArgs) validate() error {
	if len(a.IDs) == 0 {
		return errors.New(`argument "ids" is required`)
	}
	if len(a.IDs) > MaxDropIDs {
		return fmt.Errorf(`argument "ids" has %d ids; at most %d per call`, len(a.IDs), MaxDropIDs)
	}
	seen := map[string]bool{}
	for _, id := range a.IDs {
		if !contextIDRe.MatchString(id) {
			return errors.New(`argument "ids": every id is one context_list printed (m followed by digits)`)
		}
		if seen[id] {
			return fmt.Errorf(`argument "ids": %s is given twice`, id)
		}
		seen[id] = true
	}
	return nil
}

// ContextOnly reports whether a call to tool with these raw arguments can carry nothing
// but runtime-assigned entry ids: context_list, or a context_drop whose arguments decode.
// The runner labels a model turn made only of such calls (and no text) Public: it cannot
// hold a byte of what the model saw, so it does not keep the taint up once that is dropped.
func ContextOnly(tool string, raw []byte) bool {
	switch tool {
	case "context_list", "context_drop":
		_, err := DecodeArgs(tool, raw)
		return err == nil
	}
	return false
}

func contextTools() []*Tool {
	return []*Tool{{
		Name:        "context_list",
		Description: "List what this stage's conversation holds: one entry per message, with its id (for context_drop), what it is and its taint label.",
		Schema:      schemaFor[noArgs](),
		parse:       strict[noArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			if p.Context == nil {
				return nil, errors.New("context_list: this run has no conversation to list")
			}
			var b strings.Builder
			for _, e := range p.Context.List() {
				switch {
				case e.Dropped:
					fmt.Fprintf(&b, "%s %s [dropped]\n", e.ID, e.Kind)
				case e.Label != "":
					fmt.Fprintf(&b, "%s %s (%s)\n", e.ID, e.Kind, e.Label)
				default:
					fmt.Fprintf(&b, "%s %s\n", e.ID, e.Kind)
				}
			}
			return &Result{Content: b.String()}, nil
		},
	}, {
		Name:        "context_drop",
		Description: "Drop entries (ids from context_list) from this stage's conversation: they are gone from every later turn. The stage's input cannot be dropped.",
		Schema:      schemaFor[contextDropArgs](),
		parse:       strict[contextDropArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			if p.Context == nil {
				return nil, errors.New("context_drop: this run has no conversation to drop from")
			}
			a := c.Args.(contextDropArgs)
			after, err := p.Context.Drop(a.IDs)
			if err != nil {
				return nil, err
			}
			msg := fmt.Sprintf("dropped %s", strings.Join(a.IDs, ", "))
			if after != "" {
				msg += "; the context's taint label is now " + after
			}
			return &Result{Content: msg}, nil
		},
	}}
}
