package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// --- shell ---

type shellArgs struct {
	Command        string `json:"command" schema:"required"`
	TimeoutSeconds int    `json:"timeout_seconds"`
}

// timeout is the command's timeout: timeout_seconds, else two minutes.
func (a shellArgs) timeout() time.Duration {
	if a.TimeoutSeconds > 0 {
		return time.Duration(a.TimeoutSeconds) * time.Second
	}
	return 120 * time.Second
}

func (a shellArgs) validate() error {
	if a.TimeoutSeconds < 0 || a.TimeoutSeconds > 3600 {
		return errors.New("timeout_seconds must be between 0 and 3600")
	}
	return required("command", a.Command)
}

// shellTools is the shell tool: it runs through the run's Executor (its sandbox).
func shellTools() []*Tool {
	var out []*Tool
	out = append(out, &Tool{
		Name:        "shell",
		Description: "Run a shell command (sh -c) in the workdir.",
		Schema:      schemaFor[shellArgs](),
		parse:       strict[shellArgs],
		// The command's own timeout, plus a moment for the executor to kill and reap it.
		deadline: func(a Args) time.Duration { return a.(shellArgs).timeout() + 10*time.Second },
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(shellArgs)
			if p.Exec == nil {
				return nil, errors.New("shell: refused: this lev has no executor wired")
			}
			r, err := p.Exec.Shell(ctx, ShellRequest{Command: a.Command, Dir: p.FS.Workdir, Env: p.Env, Timeout: a.timeout(), Stage: c.Stage})
			if err != nil {
				return nil, fmt.Errorf("shell: %w", err)
			}
			var b strings.Builder
			fmt.Fprintf(&b, "exit code %d\n", r.ExitCode)
			if len(r.Stdout) > 0 {
				fmt.Fprintf(&b, "stdout:\n%s\n", r.Stdout)
			}
			if len(r.Stderr) > 0 {
				fmt.Fprintf(&b, "stderr:\n%s\n", r.Stderr)
			}
			return &Result{Content: b.String(), IsError: r.ExitCode != 0}, nil
		},
	})
	return out
}
