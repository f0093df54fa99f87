package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// --- submit_output ---

type submitArgs struct {
	Output json.RawMessage `json:"output" schema:"required"`
}

func (a submitArgs) validate() error {
	if len(a.Output) == 0 || string(a.Output) == "null" {
		return errors.New(`argument "output" is required`)
	}
	if len(a.Output) > MaxOutputBytes {
		return fmt.Errorf("output is %d bytes, over the %d MiB output cap (MaxOutputBytes)", len(a.Output), MaxOutputBytes>>20)
	}
	return nil
}

// submitTools is submit_output: the stage's final output.
func submitTools() []*Tool {
	var out []*Tool
	out = append(out, &Tool{
		Name:        "submit_output",
		Description: "Submit the stage's final output; the stage ends.",
		Schema:      schemaFor[submitArgs](),
		parse:       strict[submitArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			return &Result{Content: "output submitted", Output: c.Args.(submitArgs).Output}, nil
		},
	})
	return out
}
