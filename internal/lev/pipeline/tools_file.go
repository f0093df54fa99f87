package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/lever-jail/lever/internal/lev/workfs"
)

// --- file tools ---

type readFileArgs struct {
	Path     string `json:"path" schema:"required"`
	Offset   int64  `json:"offset"`
	MaxBytes int64  `json:"max_bytes"`
}

func (a readFileArgs) validate() error {
	if a.Offset < 0 || a.MaxBytes < 0 {
		return errors.New("offset and max_bytes must not be negative")
	}
	return pathArg("path", a.Path)
}
func (a readFileArgs) paths() ([]string, []string) { return []string{a.Path}, nil }

type readFilesArgs struct {
	Paths []string `json:"paths" schema:"required"`
}

func (a readFilesArgs) validate() error {
	if len(a.Paths) == 0 {
		return errors.New(`argument "paths" is required`)
	}
	if len(a.Paths) > 64 {
		return errors.New(`at most 64 paths per call`)
	}
	for _, p := range a.Paths {
		if p == "" {
			return errors.New("empty path in paths")
		}
		if err := pathArg("paths", p); err != nil {
			return err
		}
	}
	return nil
}
func (a readFilesArgs) paths() ([]string, []string) { return a.Paths, nil }

type listDirArgs struct {
	Path string `json:"path"`
}

func (a listDirArgs) validate() error {
	if a.Path == "" {
		return nil
	}
	return pathArg("path", a.Path)
}
func (a listDirArgs) paths() ([]string, []string) {
	if a.Path == "" {
		return []string{"."}, nil
	}
	return []string{a.Path}, nil
}

type writeFileArgs struct {
	Path    string `json:"path" schema:"required"`
	Content string `json:"content" schema:"required"`
}

func (a writeFileArgs) validate() error {
	if err := pathArg("path", a.Path); err != nil {
		return err
	}
	if len(a.Content) > MaxWriteBytes {
		return errors.New(workfs.WriteCapText("content is", int64(len(a.Content))))
	}
	return nil
}
func (a writeFileArgs) paths() ([]string, []string) { return nil, []string{a.Path} }

// MaxPathBytes caps a path argument: the kernel resolves nothing longer (PATH_MAX), and a
// longer one would only be echoed back in refusals.
const MaxPathBytes = 4096

// pathArg requires a path argument no longer than MaxPathBytes.
func pathArg(name, v string) error {
	if err := required(name, v); err != nil {
		return err
	}
	if len(v) > MaxPathBytes {
		return fmt.Errorf("argument %q is %d bytes, over the %d-byte path cap (MaxPathBytes, the kernel's PATH_MAX)", name, len(v), MaxPathBytes)
	}
	return nil
}

// fileTools are the file tools: reads may leave the workdir through a granted read path,
// writes never do.
func fileTools() []*Tool {
	var out []*Tool
	out = append(out, &Tool{
		Name:        "read_file",
		Description: "Read a file (relative paths are in the workdir).",
		Schema:      schemaFor[readFileArgs](),
		parse:       strict[readFileArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(readFileArgs)
			max := int64(MaxReadBytes)
			if a.MaxBytes > 0 && a.MaxBytes < max {
				max = a.MaxBytes
			}
			// Offset and max are kept apart: offset+max could overflow, and reading the
			// whole prefix to slice it off would let a large offset bypass MaxReadBytes.
			data, trunc, err := p.files().ReadFileAt("read_file", c.Reads[0], a.Offset, max)
			if err != nil {
				return nil, err
			}
			s := string(data)
			if trunc {
				s += fmt.Sprintf("\n[truncated at %d bytes]", max)
			}
			return &Result{Content: s}, nil
		},
	})
	out = append(out, &Tool{
		Name:        "read_files",
		Description: "Read several files at once.",
		Schema:      schemaFor[readFilesArgs](),
		parse:       strict[readFilesArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			var b strings.Builder
			budget := int64(MaxReadBytes)
			for _, acc := range c.Reads {
				data, trunc, err := p.files().ReadFile("read_files", acc, max(budget, 0))
				if err != nil {
					return nil, err
				}
				budget -= int64(len(data))
				fmt.Fprintf(&b, "==> %s <==\n%s\n", acc.Path, data)
				if trunc {
					b.WriteString("[truncated]\n")
				}
			}
			return &Result{Content: b.String()}, nil
		},
	})
	out = append(out, &Tool{
		Name:        "list_dir",
		Description: "List a directory (default: the workdir).",
		Schema:      schemaFor[listDirArgs](),
		parse:       strict[listDirArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			ents, more, err := p.files().ReadDir("list_dir", c.Reads[0], MaxListEntries)
			if err != nil {
				return nil, err
			}
			var b strings.Builder
			for i, e := range ents {
				suffix := ""
				switch {
				case e.IsDir():
					suffix = "/"
				case e.Type()&fs.ModeSymlink != 0:
					suffix = "@"
				}
				if b.Len()+len(e.Name())+len(suffix)+1 > MaxResultBytes {
					fmt.Fprintf(&b, "[list_dir: stopped after %d of the entries read: the listing reached the %d KiB result cap (MaxResultBytes)]\n", i, MaxResultBytes>>10)
					more = false
					break
				}
				b.WriteString(e.Name() + suffix + "\n")
			}
			if more {
				fmt.Fprintf(&b, "[list_dir: stopped at %d entries, the list_dir entry cap (MaxListEntries); the directory holds more]\n", MaxListEntries)
			}
			return &Result{Content: b.String()}, nil
		},
	})
	out = append(out, &Tool{
		Name:        "write_file",
		Description: "Write a file in the workdir, creating parent directories.",
		Schema:      schemaFor[writeFileArgs](),
		parse:       strict[writeFileArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(writeFileArgs)
			if err := p.files().WriteFile("write_file", c.Writes[0], []byte(a.Content)); err != nil {
				return nil, err
			}
			return &Result{Content: fmt.Sprintf("wrote %d bytes to %s", len(a.Content), a.Path)}, nil
		},
	})
	return out
}
