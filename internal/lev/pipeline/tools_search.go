package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// --- search tools: glob, grep ---
//
// Both search the workdir only: the fence step resolves their path like read_file's, and
// a path that resolves outside the workdir is refused even where a [read_paths] grant
// covers it (only read_file, read_files and list_dir leave the workdir). Under that root
// the walker (walk.go) never follows a symlink and re-fences every directory and file it
// opens.

type globArgs struct {
	Pattern string `json:"pattern" schema:"required"`
	Path    string `json:"path"`
}

func (a globArgs) validate() error {
	if a.Path != "" {
		if err := pathArg("path", a.Path); err != nil {
			return err
		}
	}
	return checkPattern("pattern", a.Pattern)
}
func (a globArgs) paths() ([]string, []string) { return []string{orDot(a.Path)}, nil }

type grepArgs struct {
	Pattern         string `json:"pattern" schema:"required"`
	Path            string `json:"path"`
	Glob            string `json:"glob"`
	CaseInsensitive bool   `json:"case_insensitive"`
	Context         int    `json:"context"`
	MaxMatches      int    `json:"max_matches"`
}

// maxGrepContext bounds the context lines grep prints around a match.
const maxGrepContext = 10

func (a grepArgs) validate() error {
	if a.Path != "" {
		if err := pathArg("path", a.Path); err != nil {
			return err
		}
	}
	if a.Glob != "" {
		if err := checkPattern("glob", a.Glob); err != nil {
			return err
		}
	}
	if a.Context < 0 || a.Context > maxGrepContext {
		return fmt.Errorf("argument \"context\" is %d; it must be 0 to %d lines", a.Context, maxGrepContext)
	}
	if a.MaxMatches < 0 {
		return errors.New(`argument "max_matches" must not be negative`)
	}
	_, err := a.regexp()
	return err
}
func (a grepArgs) paths() ([]string, []string) { return []string{orDot(a.Path)}, nil }

func (a grepArgs) regexp() (*regexp.Regexp, error) {
	if err := required("pattern", a.Pattern); err != nil {
		return nil, err
	}
	if len(a.Pattern) > MaxPatternBytes {
		return nil, fmt.Errorf("argument \"pattern\" is %d bytes, over the %d-byte pattern cap (MaxPatternBytes)", len(a.Pattern), MaxPatternBytes)
	}
	p := a.Pattern
	if a.CaseInsensitive {
		p = "(?i)" + p
	}
	// RE2 (Go's regexp): matching is linear in the input, so no pattern can make a search
	// run away, whatever the model writes.
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("argument \"pattern\": %v", err)
	}
	return re, nil
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

func searchTools() []*Tool {
	return []*Tool{{
		Name:        "glob",
		Description: "Find paths under path (default: the workdir) matching a glob pattern: * ? [...] within one component, ** across components (e.g. **/*.go). Symlinks are listed (suffix @), never followed; directories end in /.",
		Schema:      schemaFor[globArgs](),
		parse:       strict[globArgs],
		run:         runGlob,
	}, {
		Name:        "grep",
		Description: "Search file contents under path (default: the workdir) for a regular expression (RE2 syntax); glob filters files (a pattern with / matches the path under path, else the file name). Prints path:line:text; context adds lines around each match. Binary files and symlinks are skipped.",
		Schema:      schemaFor[grepArgs](),
		parse:       strict[grepArgs],
		run:         runGrep,
	}}
}

func runGlob(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
	a := c.Args.(globArgs)
	w := &walker{tool: "glob", fs: p.files()}
	var b strings.Builder
	n := 0
	err := w.walk(ctx, c.Reads[0], func(e entry) error {
		if !matchGlob(a.Pattern, under(w.root, e.rel)) {
			return nil
		}
		if n == MaxGlobResults || b.Len()+len(e.rel)+2 > MaxResultBytes {
			fmt.Fprintf(&b, "[glob: stopped at %d paths, the glob result cap (MaxGlobResults or the %d KiB MaxResultBytes)]\n", n, MaxResultBytes>>10)
			return errStop
		}
		n++
		b.WriteString(e.rel + suffix(e.kind) + "\n")
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	if n == 0 {
		b.WriteString("no paths match\n")
	}
	w.notes(&b)
	return &Result{Content: b.String()}, nil
}

func suffix(k fs.FileMode) string {
	switch k {
	case fs.ModeDir:
		return "/"
	case fs.ModeSymlink:
		return "@"
	}
	return ""
}

func runGrep(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
	a := c.Args.(grepArgs)
	re, err := a.regexp()
	if err != nil {
		return nil, err
	}
	limit := MaxGrepMatches
	if a.MaxMatches > 0 && a.MaxMatches < limit {
		limit = a.MaxMatches
	}
	w := &walker{tool: "grep", fs: p.files()}
	var b strings.Builder
	budget := int64(MaxGrepBytes)
	matches, binary, cut := 0, 0, 0
	var notes []string
	visit := func(e entry) error {
		if e.kind != 0 {
			return nil // directories are walked, symlinks never followed
		}
		if a.Glob != "" {
			name := under(w.root, e.rel)
			if !strings.Contains(a.Glob, "/") {
				name = path.Base(e.rel)
			}
			if !matchGlob(a.Glob, name) {
				return nil
			}
		}
		if budget <= 0 {
			notes = append(notes, fmt.Sprintf("[grep: stopped: read %d MiB of files, the grep read cap (MaxGrepBytes)]", MaxGrepBytes>>20))
			return errStop
		}
		acc, err := w.access(e.rel)
		if err != nil {
			w.skipped++
			return nil
		}
		data, trunc, err := w.fs.ReadFile("grep", acc, min(budget, MaxReadBytes))
		if err != nil {
			w.skipped++
			return nil
		}
		budget -= int64(len(data))
		if bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 {
			binary++
			return nil
		}
		if trunc {
			cut++
		}
		done := grepFile(&b, e.rel, data, re, a.Context, limit, &matches)
		switch {
		case done && b.Len() > MaxResultBytes:
			notes = append(notes, fmt.Sprintf("[grep: stopped after %d matches: the output reached the %d KiB result cap (MaxResultBytes)]", matches, MaxResultBytes>>10))
			return errStop
		case done:
			notes = append(notes, fmt.Sprintf("[grep: stopped at %d matches, the grep match cap (max_matches, at most MaxGrepMatches = %d)]", limit, MaxGrepMatches))
			return errStop
		}
		return nil
	}
	if err := w.walk(ctx, c.Reads[0], visit); err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	if matches == 0 {
		b.WriteString("no matches\n")
	}
	for _, n := range notes {
		b.WriteString(n + "\n")
	}
	if cut > 0 {
		fmt.Fprintf(&b, "[grep: %d file(s) searched in their first %d MiB only (MaxReadBytes)]\n", cut, MaxReadBytes>>20)
	}
	if binary > 0 {
		fmt.Fprintf(&b, "[grep: skipped %d binary file(s)]\n", binary)
	}
	w.notes(&b)
	return &Result{Content: CapResult(b.String())}, nil
}

// grepFile writes data's matching lines (and context lines around them) and reports
// whether the match cap was reached.
func grepFile(b *strings.Builder, rel string, data []byte, re *regexp.Regexp, ctxLines, limit int, matches *int) bool {
	lines := strings.Split(string(data), "\n")
	last := -1 // the last line printed
	for i, line := range lines {
		if !re.MatchString(line) {
			continue
		}
		if *matches == limit {
			return true
		}
		*matches++
		from := max(i-ctxLines, last+1)
		if last >= 0 && from > last+1 && ctxLines > 0 {
			b.WriteString("--\n")
		}
		for j := from; j < i; j++ {
			writeLine(b, rel, j, '-', lines[j])
		}
		writeLine(b, rel, i, ':', line)
		last = i
		// Context after the match, stopping at the next match (printed as one).
		for j := i + 1; j <= min(i+ctxLines, len(lines)-1) && !re.MatchString(lines[j]); j++ {
			writeLine(b, rel, j, '-', lines[j])
			last = j
		}
		if b.Len() > MaxResultBytes {
			return true
		}
	}
	return false
}

func writeLine(b *strings.Builder, rel string, i int, sep byte, line string) {
	b.WriteString(rel)
	b.WriteByte(sep)
	b.WriteString(strconv.Itoa(i + 1))
	b.WriteByte(sep)
	line = strings.TrimSuffix(line, "\r")
	if len(line) > MaxGrepLineBytes {
		line = cutAt(line, MaxGrepLineBytes) + " [line cut at 512 bytes]"
	}
	b.WriteString(line)
	b.WriteByte('\n')
}
