package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/lev/workfs"
)

// --- edit_file ---
//
// One edit (old_string, new_string, replace_all) or several (edits, applied in order,
// each to the result of the one before). Every edit must match exactly: an old_string
// not found, or found more than once without replace_all, fails the whole call, and a
// failed call writes nothing (the edits are applied in memory and the file is replaced
// once, through the descriptor workfs checked).

// maxEdits bounds the edits of one call.
const maxEdits = 100

type editOp struct {
	OldString  string `json:"old_string" schema:"required"`
	NewString  string `json:"new_string" schema:"required"`
	ReplaceAll bool   `json:"replace_all"`
}

type editFileArgs struct {
	Path       string   `json:"path" schema:"required"`
	OldString  string   `json:"old_string"`
	NewString  string   `json:"new_string"`
	ReplaceAll bool     `json:"replace_all"`
	Edits      []editOp `json:"edits"`
}

func (a editFileArgs) validate() error {
	if err := pathArg("path", a.Path); err != nil {
		return err
	}
	single := a.OldString != "" || a.NewString != "" || a.ReplaceAll
	switch {
	case single && a.Edits != nil:
		return errors.New(`give either old_string/new_string/replace_all or edits, not both`)
	case a.Edits != nil && len(a.Edits) == 0:
		return errors.New(`argument "edits" is empty`)
	case len(a.Edits) > maxEdits:
		return fmt.Errorf(`argument "edits" has %d edits; at most %d per call`, len(a.Edits), maxEdits)
	case a.Edits == nil:
		return required("old_string", a.OldString)
	}
	for i, e := range a.Edits {
		if e.OldString == "" {
			return fmt.Errorf(`edits[%d]: argument "old_string" is required`, i)
		}
	}
	return nil
}

// ops is the call's edits, whichever form it used.
func (a editFileArgs) ops() []editOp {
	if a.Edits != nil {
		return a.Edits
	}
	return []editOp{{OldString: a.OldString, NewString: a.NewString, ReplaceAll: a.ReplaceAll}}
}

// edit_file reads what it edits, but only inside the workdir: the write check covers both.
func (a editFileArgs) paths() ([]string, []string) { return nil, []string{a.Path} }

// applyEdits applies ops to data in order. Sizes are checked before each result is built:
// a replace_all that would pass the write cap allocates nothing.
func applyEdits(path string, data string, ops []editOp) (string, int, error) {
	total := 0
	for i, op := range ops {
		which := ""
		if len(ops) > 1 {
			which = fmt.Sprintf("edits[%d]: ", i)
		}
		n := strings.Count(data, op.OldString)
		switch {
		case n == 0:
			return "", 0, fmt.Errorf("edit_file: %sold_string not found in %s; nothing was written", which, path)
		case n > 1 && !op.ReplaceAll:
			return "", 0, fmt.Errorf("edit_file: %sold_string occurs %d times in %s; make it unique or set replace_all; nothing was written", which, n, path)
		}
		k := 1
		if op.ReplaceAll {
			k = n
		}
		size := int64(len(data)) + int64(k)*(int64(len(op.NewString))-int64(len(op.OldString)))
		if err := workfs.CheckWriteSize("edit_file", path, size, "the result would be"); err != nil {
			return "", 0, err
		}
		data = strings.Replace(data, op.OldString, op.NewString, k)
		total += k
	}
	return data, total, nil
}

func editTools() []*Tool {
	return []*Tool{{
		Name:        "edit_file",
		Description: "Edit a workdir file by exact string replacement: old_string must occur exactly once (or set replace_all). For several changes pass edits, a list of {old_string, new_string, replace_all} applied in order; if any edit fails, nothing is written.",
		Schema:      schemaFor[editFileArgs](),
		parse:       strict[editFileArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(editFileArgs)
			var n int
			err := p.files().EditFile("edit_file", c.Writes[0], func(data []byte) ([]byte, error) {
				out, k, err := applyEdits(a.Path, string(data), a.ops())
				n = k
				return []byte(out), err
			})
			if err != nil {
				return nil, err
			}
			return &Result{Content: fmt.Sprintf("replaced %d occurrence(s) in %s", n, a.Path)}, nil
		},
	}}
}
