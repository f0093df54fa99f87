package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// --- todo tools ---
//
// The run's todo list, kept in runs/<id>/todo.json (lev's state: no file tool reaches it).
// todo_write replaces the whole list; todo_read returns it. Neither is gated (neither can
// send a byte off the machine), and the list cannot launder taint: the gate labels what
// todo_write stored with the context's label when it was written, and todo_read's result
// carries that label back into the context (docs/lev-security.md).

// The todo list's caps.
const (
	MaxTodos         = 100
	MaxTodoItemBytes = 2048
)

// TodoFile is the todo list's file name in the run's directory.
const TodoFile = "todo.json"

type todoItem struct {
	Content string `json:"content" schema:"required"`
	Status  string `json:"status" schema:"required"`
}

type todoWriteArgs struct {
	Todos []todoItem `json:"todos" schema:"required"`
}

var todoStatuses = map[string]bool{"pending": true, "in_progress": true, "completed": true}

func (a todoWriteArgs) validate() error {
	if a.Todos == nil {
		return errors.New(`argument "todos" is required (an empty list clears it)`)
	}
	if len(a.Todos) > MaxTodos {
		return fmt.Errorf(`argument "todos" has %d items, over the %d-item todo cap (MaxTodos)`, len(a.Todos), MaxTodos)
	}
	for i, t := range a.Todos {
		if strings.TrimSpace(t.Content) == "" {
			return fmt.Errorf(`todos[%d]: "content" is required`, i)
		}
		if len(t.Content) > MaxTodoItemBytes {
			return fmt.Errorf(`todos[%d]: "content" is %d bytes, over the %d-byte cap (MaxTodoItemBytes)`, i, len(t.Content), MaxTodoItemBytes)
		}
		if !todoStatuses[t.Status] {
			return fmt.Errorf(`todos[%d]: "status" is %q; it must be pending, in_progress or completed`, i, t.Status)
		}
	}
	return nil
}

type noArgs struct{}

func (noArgs) validate() error { return nil }

func todoTools() []*Tool {
	return []*Tool{{
		Name:        "todo_write",
		Description: "Replace the run's todo list: todos is the whole list, each {content, status: pending|in_progress|completed}.",
		Schema:      schemaFor[todoWriteArgs](),
		parse:       strict[todoWriteArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(todoWriteArgs)
			if err := p.writeTodos(a.Todos); err != nil {
				return nil, err
			}
			return &Result{Content: fmt.Sprintf("todo list saved (%d item(s))\n%s", len(a.Todos), renderTodos(a.Todos))}, nil
		},
	}, {
		Name:        "todo_read",
		Description: "Read the run's todo list.",
		Schema:      schemaFor[noArgs](),
		parse:       strict[noArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			todos, err := p.readTodos()
			if err != nil {
				return nil, err
			}
			if len(todos) == 0 {
				return &Result{Content: "the todo list is empty"}, nil
			}
			return &Result{Content: renderTodos(todos)}, nil
		},
	}}
}

func renderTodos(todos []todoItem) string {
	var b strings.Builder
	mark := map[string]string{"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}
	for i, t := range todos {
		fmt.Fprintf(&b, "%d. %s %s\n", i+1, mark[t.Status], t.Content)
	}
	return b.String()
}

func (p *Pipeline) todoPath() (string, error) {
	if p.RunDir == "" {
		return "", errors.New("this run has no run directory to keep a todo list in")
	}
	return filepath.Join(p.RunDir, TodoFile), nil
}

// writeTodos replaces todo.json atomically (a crash leaves the old list or the new one).
func (p *Pipeline) writeTodos(todos []todoItem) error {
	path, err := p.todoPath()
	if err != nil {
		return err
	}
	b, err := json.Marshal(todos)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("todo_write: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("todo_write: %w", err)
	}
	return nil
}

func (p *Pipeline) readTodos() ([]todoItem, error) {
	path, err := p.todoPath()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("todo_read: %w", err)
	}
	var todos []todoItem
	if err := json.Unmarshal(b, &todos); err != nil {
		return nil, fmt.Errorf("todo_read: %s: %w", path, err)
	}
	return todos, nil
}
