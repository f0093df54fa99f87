package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/strictjson"
	"github.com/lever-jail/lever/internal/lev/toolcat"
)

// Tool is a tool the pipeline can dispatch to: a built-in (its facts are its row of the
// tool catalogue, toolcat) or a run's own (an MCP server's, NewExternalTool).
type Tool struct {
	Name        string
	Description string
	// Class is what the tool touches: a built-in's from its catalogue row, an external
	// tool's as the user classified its server (toolcat.Outbound or toolcat.Local).
	Class  toolcat.Class
	Schema json.RawMessage
	parse  func(json.RawMessage) (Args, error)
	run    func(ctx context.Context, p *Pipeline, c *Call) (*Result, error)
	// fence is how the fence step treats the tool's paths (a built-in's catalogue row;
	// toolcat.Workdir: its reads never leave the workdir, whatever [read_paths] grants).
	fence toolcat.Fence
	// deadline is how long one call may take (default DefaultDeadline): the pipeline
	// abandons a call that runs past it.
	deadline func(Args) time.Duration
}

// DefaultDeadline bounds a built-in tool call that has no deadline of its own (file tools,
// submit_output). File tools act on regular files and directories only, so this is a
// backstop for a filesystem that stops answering, not a normal wait.
const DefaultDeadline = 30 * time.Second

// HTTPDeadline bounds one HTTP tool call, connect to last byte.
const HTTPDeadline = 60 * time.Second

// Deadline is the per-call deadline of this tool for these arguments.
func (t *Tool) Deadline(a Args) time.Duration {
	if t.deadline != nil {
		return t.deadline(a)
	}
	return DefaultDeadline
}

// Args is one call's arguments, decoded once by the offer step into the tool's own type
// (readFileArgs, fetchArgs, ...; ObjectArgs for a tool with no Go type).
type Args interface{ validate() error }

// ObjectArgs are the arguments of a tool with no Go argument type (an MCP server's tool,
// made by NewExternalTool): a JSON object decoded with the same strictness, no key
// repeated in any case.
type ObjectArgs map[string]any

// validate: an object has nothing more to check than its strict decoding; the server's
// own input schema is the server's to enforce.
func (ObjectArgs) validate() error { return nil }

// decodeObject is the decoder of every tool that is not built in. Like strict it ends in
// validate, so every Args passes the same two stages whatever its type.
func decodeObject(raw json.RawMessage) (Args, error) {
	m, err := strictjson.Object(raw)
	if err != nil {
		return nil, err
	}
	args := ObjectArgs(m)
	if err := args.validate(); err != nil {
		return nil, err
	}
	return args, nil
}

// DecodeArgs decodes raw by tool name with the decoder the offer step uses for that tool
// (a built-in's own argument type, else an external tool's ObjectArgs), for code that
// holds a name rather than a *Tool (the tests of the decoders and of the gate).
func DecodeArgs(tool string, raw json.RawMessage) (Args, error) {
	if t := registry[tool]; t != nil {
		return t.parse(raw)
	}
	return decodeObject(raw)
}

// registry is lev's built-in tools, one family per file, put together here explicitly
// (nothing registers itself from an init function: what lev offers is this list).
var registry = table(fileTools(), searchTools(), editTools(), todoTools(), contextTools(), shellTools(), netTools(), webSearchTools(), submitTools(),
	agentTools(), installTools())

func table(families ...[]*Tool) map[string]*Tool {
	m := map[string]*Tool{}
	for _, f := range families {
		for _, t := range f {
			if m[t.Name] != nil {
				panic("pipeline: tool " + t.Name + " defined twice")
			}
			row, ok := toolcat.Lookup(t.Name)
			if !ok {
				panic("pipeline: tool " + t.Name + " has no row in the tool catalogue (toolcat)")
			}
			t.Class, t.fence = row.Class, row.Fence
			m[t.Name] = t
		}
	}
	return m
}

// Lookup returns a built-in tool, or nil.
func Lookup(name string) *Tool { return registry[name] }

// Known reports whether name is a built-in tool (blueprint validation uses it).
func Known(name string) bool { return registry[name] != nil }

// Specs are the offers for the model, in the order of names.
func Specs(names []string) []provider.ToolSpec {
	var out []provider.ToolSpec
	for _, n := range names {
		if t := registry[n]; t != nil {
			out = append(out, provider.ToolSpec{Name: t.Name, Description: t.Description, Schema: t.Schema})
		}
	}
	return out
}

// strict decodes args into T (strictjson: exact keys, no key twice in any case, right
// types, nothing after the object), then validates.
func strict[T Args](raw json.RawMessage) (Args, error) {
	var v T
	if err := strictjson.Decode(raw, &v); err != nil {
		return nil, err
	}
	if err := v.validate(); err != nil {
		return nil, err
	}
	return v, nil
}

func required(name, v string) error {
	if v == "" {
		return fmt.Errorf("argument %q is required", name)
	}
	return nil
}

// NewExternalTool makes a tool that is not built in (an MCP server's) for one run's
// Pipeline.Tools. Its arguments decode, once and strictly, into ObjectArgs (no key twice
// in any case, nothing after the object); run gets that value, deadline bounds each call.
// A name that is a built-in's is refused: nothing shadows one.
//
// Whatever run hands back, its result's content or its error's message, reaches the model
// capped at MaxResultBytes (CapResult). The cap sits here rather than in each caller: this
// is the only way to make a tool outside the registry (Tool.run is unexported), so no
// external tool's bytes can reach the model around it, and an error carries the peer's own
// words (an MCP server's JSON-RPC error message, up to its transport's cap) as surely as a
// result does.
func NewExternalTool(name, description string, class toolcat.Class, schema json.RawMessage, deadline time.Duration,
	run func(ctx context.Context, args ObjectArgs) (*Result, error)) (*Tool, error) {
	if Known(name) {
		return nil, fmt.Errorf("tool %q: the name of a built-in tool", name)
	}
	return &Tool{
		Name: name, Description: description, Class: class, Schema: schema,
		parse: decodeObject,
		run: func(ctx context.Context, _ *Pipeline, c *Call) (*Result, error) {
			res, err := run(ctx, c.Args.(ObjectArgs))
			if err != nil {
				// Made the error result here (as execute would) so that it is capped too.
				return &Result{Content: CapResult(err.Error()), IsError: true}, nil
			}
			if res == nil {
				return nil, fmt.Errorf("%s: the tool returned no result", name)
			}
			capped := *res
			capped.Content = CapResult(res.Content)
			return &capped, nil
		},
		deadline: func(Args) time.Duration { return deadline },
	}, nil
}

// AnswerCall is the submit_output call a plain final answer stands for: the engine puts
// it through the gate like one, with the answer as its decoded output.
func AnswerCall(id string, st Stage, text string) *Call {
	out, _ := json.Marshal(text)
	return &Call{ID: id, Tool: "submit_output", Args: submitArgs{Output: out}, Stage: st, Spec: registry["submit_output"]}
}
