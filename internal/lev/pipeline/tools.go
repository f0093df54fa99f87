package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/lev/capread"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/strictjson"
)

// Class says what a tool can do, for the taint gate.
type Class string

const (
	ClassRead     Class = "read"     // file reads: may leave the workdir through a grant
	ClassWrite    Class = "write"    // file writes: confined to the workdir
	ClassOutbound Class = "outbound" // can send bytes off the machine: shell, HTTP tools
	ClassOutput   Class = "output"   // submit_output: the final answer leaves the machine
	// ClassLocal: an MCP server the user classified as unable to send data off the machine.
	ClassLocal Class = "local"
)

// Tool is a built-in tool.
type Tool struct {
	Name        string
	Description string
	Class       Class
	Schema      json.RawMessage
	parse       func(json.RawMessage) (Args, error)
	run         func(ctx context.Context, p *Pipeline, c *Call) (*Result, error)
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

// ObjectArgs are the arguments of a tool with no Go argument type (an MCP tool, when lev
// has them): a JSON object decoded with the same strictness, no key repeated in any case.
type ObjectArgs map[string]any

func (ObjectArgs) validate() error { return nil }

// DecodeArgs decodes raw for tool, strictly: a built-in's own argument type, else
// ObjectArgs. It is the one decoder of tool arguments; nothing else reads raw arguments.
func DecodeArgs(tool string, raw json.RawMessage) (Args, error) {
	if t := registry[tool]; t != nil {
		return t.parse(raw)
	}
	m, err := strictjson.Object(raw)
	if err != nil {
		return nil, err
	}
	return ObjectArgs(m), nil
}

// Output limits what one tool result puts in the model's context.
const (
	MaxReadBytes   = 1 << 20
	MaxResultBytes = 256 << 10
)

var registry = map[string]*Tool{}

// Lookup returns a built-in tool, or nil.
func Lookup(name string) *Tool { return registry[name] }

// Known reports whether name is a built-in tool (blueprint validation uses it).
func Known(name string) bool { return registry[name] != nil }

// Names lists the built-in tools.
func Names() []string {
	var n []string
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

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

func register(t *Tool) { registry[t.Name] = t }

// NewExternalTool makes a tool that is not built in (an MCP server's) for one run's
// Pipeline.Tools. Its arguments decode, once and strictly, into ObjectArgs (no key twice
// in any case, nothing after the object); run gets that value, deadline bounds each call.
// A name that is a built-in's is refused: nothing shadows one.
func NewExternalTool(name, description string, class Class, schema json.RawMessage, deadline time.Duration,
	run func(ctx context.Context, args ObjectArgs) (*Result, error)) (*Tool, error) {
	if Known(name) {
		return nil, fmt.Errorf("tool %q: the name of a built-in tool", name)
	}
	return &Tool{
		Name: name, Description: description, Class: class, Schema: schema,
		parse: func(raw json.RawMessage) (Args, error) {
			m, err := strictjson.Object(raw)
			if err != nil {
				return nil, err
			}
			return ObjectArgs(m), nil
		},
		run:      func(ctx context.Context, _ *Pipeline, c *Call) (*Result, error) { return run(ctx, c.Args.(ObjectArgs)) },
		deadline: func(Args) time.Duration { return deadline },
	}, nil
}

// --- file tools ---

type readFileArgs struct {
	Path     string `json:"path"`
	Offset   int64  `json:"offset"`
	MaxBytes int64  `json:"max_bytes"`
}

func (a readFileArgs) validate() error {
	if a.Offset < 0 || a.MaxBytes < 0 {
		return errors.New("offset and max_bytes must not be negative")
	}
	return required("path", a.Path)
}
func (a readFileArgs) paths() ([]string, []string) { return []string{a.Path}, nil }

type readFilesArgs struct {
	Paths []string `json:"paths"`
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
	}
	return nil
}
func (a readFilesArgs) paths() ([]string, []string) { return a.Paths, nil }

type listDirArgs struct {
	Path string `json:"path"`
}

func (a listDirArgs) validate() error { return nil }
func (a listDirArgs) paths() ([]string, []string) {
	if a.Path == "" {
		return []string{"."}, nil
	}
	return []string{a.Path}, nil
}

type writeFileArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

func (a writeFileArgs) validate() error             { return required("path", a.Path) }
func (a writeFileArgs) paths() ([]string, []string) { return nil, []string{a.Path} }

type editFileArgs struct {
	Path       string `json:"path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
}

func (a editFileArgs) validate() error {
	if err := required("path", a.Path); err != nil {
		return err
	}
	return required("old_string", a.OldString)
}

// edit_file reads what it edits, but only inside the workdir: the write check covers both.
func (a editFileArgs) paths() ([]string, []string) { return nil, []string{a.Path} }

func init() {
	register(&Tool{
		Name: "read_file", Class: ClassRead,
		Description: "Read a file (relative paths are in the workdir).",
		Schema:      schema(`"path":{"type":"string"},"offset":{"type":"integer"},"max_bytes":{"type":"integer"}`, "path"),
		parse:       strict[readFileArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(readFileArgs)
			max := int64(MaxReadBytes)
			if a.MaxBytes > 0 && a.MaxBytes < max {
				max = a.MaxBytes
			}
			// Offset and max are kept apart: offset+max could overflow, and reading the
			// whole prefix to slice it off would let a large offset bypass MaxReadBytes.
			data, trunc, err := p.FS.ReadFileAt("read_file", c.Reads[0], a.Offset, max)
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
	register(&Tool{
		Name: "read_files", Class: ClassRead,
		Description: "Read several files at once.",
		Schema:      schema(`"paths":{"type":"array","items":{"type":"string"}}`, "paths"),
		parse:       strict[readFilesArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			var b strings.Builder
			budget := int64(MaxReadBytes)
			for _, acc := range c.Reads {
				data, trunc, err := p.FS.ReadFile("read_files", acc, max(budget, 0))
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
	register(&Tool{
		Name: "list_dir", Class: ClassRead,
		Description: "List a directory (default: the workdir).",
		Schema:      schema(`"path":{"type":"string"}`),
		parse:       strict[listDirArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			ents, err := p.FS.ReadDir("list_dir", c.Reads[0])
			if err != nil {
				return nil, err
			}
			var b strings.Builder
			for _, e := range ents {
				suffix := ""
				switch {
				case e.IsDir():
					suffix = "/"
				case e.Type()&fs.ModeSymlink != 0:
					suffix = "@"
				}
				b.WriteString(e.Name() + suffix + "\n")
			}
			return &Result{Content: b.String()}, nil
		},
	})
	register(&Tool{
		Name: "write_file", Class: ClassWrite,
		Description: "Write a file in the workdir, creating parent directories.",
		Schema:      schema(`"path":{"type":"string"},"content":{"type":"string"}`, "path", "content"),
		parse:       strict[writeFileArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(writeFileArgs)
			if err := p.FS.WriteFile("write_file", c.Writes[0], []byte(a.Content)); err != nil {
				return nil, err
			}
			return &Result{Content: fmt.Sprintf("wrote %d bytes to %s", len(a.Content), a.Path)}, nil
		},
	})
	register(&Tool{
		Name: "edit_file", Class: ClassWrite,
		Description: "Replace old_string with new_string in a workdir file (once, unless replace_all).",
		Schema:      schema(`"path":{"type":"string"},"old_string":{"type":"string"},"new_string":{"type":"string"},"replace_all":{"type":"boolean"}`, "path", "old_string", "new_string"),
		parse:       strict[editFileArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(editFileArgs)
			acc := c.Writes[0]
			data, trunc, err := p.FS.ReadFile("edit_file", acc, 16<<20)
			if err != nil {
				return nil, err
			}
			if trunc {
				return nil, fmt.Errorf("edit_file: %s is over 16 MiB", a.Path)
			}
			n := strings.Count(string(data), a.OldString)
			switch {
			case n == 0:
				return nil, fmt.Errorf("edit_file: old_string not found in %s", a.Path)
			case n > 1 && !a.ReplaceAll:
				return nil, fmt.Errorf("edit_file: old_string occurs %d times in %s; make it unique or set replace_all", n, a.Path)
			}
			out := strings.Replace(string(data), a.OldString, a.NewString, map[bool]int{true: -1, false: 1}[a.ReplaceAll])
			if err := p.FS.WriteFile("edit_file", acc, []byte(out)); err != nil {
				return nil, err
			}
			return &Result{Content: fmt.Sprintf("replaced %d occurrence(s) in %s", map[bool]int{true: n, false: 1}[a.ReplaceAll], a.Path)}, nil
		},
	})
}

// --- shell ---

type shellArgs struct {
	Command        string `json:"command"`
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

func init() {
	register(&Tool{
		Name: "shell", Class: ClassOutbound,
		Description: "Run a shell command (sh -c) in the workdir.",
		Schema:      schema(`"command":{"type":"string"},"timeout_seconds":{"type":"integer"}`, "command"),
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
}

// --- network tools ---

type fetchArgs struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

func (a fetchArgs) validate() error                      { return checkURL(a.URL) }
func (a fetchArgs) request() (string, map[string]string) { return a.URL, a.Headers }

// webFetchArgs: web_fetch takes a URL and nothing else (its schema has no headers).
type webFetchArgs struct {
	URL string `json:"url"`
}

func (a webFetchArgs) validate() error                      { return checkURL(a.URL) }
func (a webFetchArgs) targets() []string                    { return []string{a.URL} }
func (a webFetchArgs) request() (string, map[string]string) { return a.URL, nil }
func (a fetchArgs) targets() []string                       { return []string{a.URL} }

type postArgs struct {
	URL         string            `json:"url"`
	Body        string            `json:"body"`
	ContentType string            `json:"content_type"`
	Headers     map[string]string `json:"headers"`
}

func (a postArgs) validate() error   { return checkURL(a.URL) }
func (a postArgs) targets() []string { return []string{a.URL} }

func httpDeadline(Args) time.Duration { return HTTPDeadline }

func checkURL(s string) error {
	if s == "" {
		return errors.New(`argument "url" is required`)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url %q: want an absolute http or https URL", s)
	}
	return nil
}

func doHTTP(ctx context.Context, p *Pipeline, tool, method, u, body, ctype string, hdr map[string]string) (*Result, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	client := p.HTTP
	if client == nil {
		client = &http.Client{Timeout: HTTPDeadline, CheckRedirect: provider.SameOrigin}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	data, err := capread.Body(resp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	s := string(data)
	if len(s) > MaxResultBytes {
		s = s[:MaxResultBytes] + fmt.Sprintf("\n[truncated at %d bytes]", MaxResultBytes)
	}
	return &Result{Content: fmt.Sprintf("HTTP %d\n%s", resp.StatusCode, s), IsError: resp.StatusCode >= 400}, nil
}

func init() {
	get := func(tool string) func(context.Context, *Pipeline, *Call) (*Result, error) {
		return func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			u, hdr := c.Args.(interface {
				request() (string, map[string]string)
			}).request()
			return doHTTP(ctx, p, tool, http.MethodGet, u, "", "", hdr)
		}
	}
	register(&Tool{Name: "web_fetch", Class: ClassOutbound, Description: "Fetch a web page.",
		Schema: schema(`"url":{"type":"string"}`, "url"), parse: strict[webFetchArgs], run: get("web_fetch"), deadline: httpDeadline})
	register(&Tool{Name: "http_get", Class: ClassOutbound, Description: "HTTP GET a URL.",
		Schema: schema(`"url":{"type":"string"},"headers":{"type":"object","additionalProperties":{"type":"string"}}`, "url"),
		parse:  strict[fetchArgs], run: get("http_get"), deadline: httpDeadline})
	register(&Tool{Name: "http_post", Class: ClassOutbound, Description: "HTTP POST a body to a URL.",
		Schema: schema(`"url":{"type":"string"},"body":{"type":"string"},"content_type":{"type":"string"},"headers":{"type":"object","additionalProperties":{"type":"string"}}`, "url"),
		parse:  strict[postArgs], deadline: httpDeadline,
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(postArgs)
			return doHTTP(ctx, p, "http_post", http.MethodPost, a.URL, a.Body, a.ContentType, a.Headers)
		}})
}

// --- submit_output ---

type submitArgs struct {
	Output json.RawMessage `json:"output"`
}

func (a submitArgs) validate() error {
	if len(a.Output) == 0 || string(a.Output) == "null" {
		return errors.New(`argument "output" is required`)
	}
	return nil
}

func init() {
	register(&Tool{
		Name: "submit_output", Class: ClassOutput,
		Description: "Submit the stage's final output; the stage ends.",
		Schema:      schema(`"output":{}`, "output"),
		parse:       strict[submitArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			return &Result{Content: "output submitted", Output: c.Args.(submitArgs).Output}, nil
		},
	})
}

// AnswerCall is the submit_output call a plain final answer stands for: the engine puts
// it through the gate like one, with the answer as its decoded output.
func AnswerCall(id string, st Stage, text string) *Call {
	out, _ := json.Marshal(text)
	return &Call{ID: id, Tool: "submit_output", Args: submitArgs{Output: out}, Stage: st, Spec: registry["submit_output"]}
}

func schema(props string, req ...string) json.RawMessage {
	r, _ := json.Marshal(req)
	if len(req) == 0 {
		r = []byte("[]")
	}
	return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(r) + `,"additionalProperties":false}`)
}
