package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// --- interaction and sub-agent tools (not gated: docs/lev-security.md, "Which tools are gated") ---

// Operator puts an agent's question to the person who runs it and returns their answer.
// The runner's implementation relays it like a permission prompt (an ask event, answered
// by lev run's terminal or POST /api/agents/{id}/answer); nil on a headless run. Nothing
// the agent itself does (its text, a tool's output) can answer it.
type Operator interface {
	AskOperator(ctx context.Context, question string) (string, error)
}

// OperatorDeadline bounds one ask_operator call: past the runner's 10-minute wait for an
// answer, with room to record it.
const OperatorDeadline = 15 * time.Minute

// MaxQuestionBytes caps an ask_operator question: it is shown whole to the operator.
const MaxQuestionBytes = 4 << 10

type askOperatorArgs struct {
	Question string `json:"question" schema:"required"`
}

func (a askOperatorArgs) validate() error {
	if err := required("question", a.Question); err != nil {
		return err
	}
	if len(a.Question) > MaxQuestionBytes {
		return fmt.Errorf("question is %d bytes, over the %d KiB cap", len(a.Question), MaxQuestionBytes>>10)
	}
	if !utf8.ValidString(a.Question) {
		return errors.New("question is not UTF-8")
	}
	return nil
}

// SubAgentRequest is what a spawn_agent call asks its child to be allowed. The runner
// grants it only when every part is within the parent's own (SubAgents).
type SubAgentRequest struct {
	Task      string
	Tools     []string
	ReadPaths []string
	Network   *bool  // nil: the parent's setting
	Label     string // the child's starting taint label; "": the parent's level
}

// SubAgents runs a child run for a spawn_agent call and returns its result, labelled with
// the child run's label (Result.Label). A request wider than the parent is refused.
type SubAgents interface {
	SpawnAgent(ctx context.Context, c *Call, req SubAgentRequest) (*Result, error)
}

// SubAgentDeadline bounds one spawn_agent call: the whole child run.
const SubAgentDeadline = 30 * time.Minute

// MaxTaskBytes caps a sub-agent's task text.
const MaxTaskBytes = 64 << 10

type spawnAgentArgs struct {
	Task      string   `json:"task" schema:"required"`
	Tools     []string `json:"tools" schema:"required"`
	ReadPaths []string `json:"read_paths"`
	Network   *bool    `json:"network"`
	Label     string   `json:"label"`
}

func (a spawnAgentArgs) validate() error {
	if err := required("task", a.Task); err != nil {
		return err
	}
	if len(a.Task) > MaxTaskBytes {
		return fmt.Errorf("task is %d bytes, over the %d KiB cap", len(a.Task), MaxTaskBytes>>10)
	}
	if len(a.Tools) == 0 {
		return errors.New(`argument "tools" is required: the child gets exactly the tools listed`)
	}
	seen := map[string]bool{}
	for _, t := range a.Tools {
		if err := toolnames.Check(t); err != nil {
			return fmt.Errorf("tools: %w", err)
		}
		if seen[t] {
			return fmt.Errorf("tools: %q listed twice", t)
		}
		seen[t] = true
	}
	switch a.Label {
	case "", "public", "internal", "private":
	default:
		return fmt.Errorf("bad label %q (want public, internal or private)", a.Label)
	}
	return nil
}

func agentTools() []*Tool {
	return []*Tool{
		{
			Name:        "ask_operator",
			Description: "Ask the person running this agent a question and wait for their answer (up to 10 minutes). Only they can answer; on an unattended run there is nobody to ask.",
			Schema:      schemaFor[askOperatorArgs](),
			parse:       strict[askOperatorArgs],
			run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
				if p.Operator == nil {
					return &Result{Content: "ask_operator: nobody is there to answer: this run is not interactive (lev run from a terminal, or spawned with \"interactive\": true), so no answer was given", IsError: true}, nil
				}
				ans, err := p.Operator.AskOperator(ctx, c.Args.(askOperatorArgs).Question)
				if err != nil {
					return nil, fmt.Errorf("ask_operator: %w", err)
				}
				return &Result{Content: ans}, nil
			},
			deadline: func(Args) time.Duration { return OperatorDeadline },
		},
		{
			Name:        "spawn_agent",
			Description: "Run a worker sub-agent on a task and return its final output. It gets only the tools, read paths and network listed, each of which must be the calling stage's own; it starts with this run's taint, and its result carries the worker's.",
			Schema:      schemaFor[spawnAgentArgs](),
			parse:       strict[spawnAgentArgs],
			run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
				if p.SubAgents == nil {
					return nil, errors.New("spawn_agent: this lev runs no sub-agents here")
				}
				a := c.Args.(spawnAgentArgs)
				return p.SubAgents.SpawnAgent(ctx, c, SubAgentRequest(a))
			},
			deadline: func(Args) time.Duration { return SubAgentDeadline },
		},
	}
}

// Refused is a refusal result for code outside the package (the runner's sub-agent
// checks): step and code as Refusal records them.
func Refused(step, code, msg string) *Result { return refused(step, code, msg) }
