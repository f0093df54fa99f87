// Package readpaths implements the read-path fence: the [read_paths] entries a blueprint
// declares, the grants in the user's config.toml, and matching a symlink-resolved real path
// against the entries that are both declared and granted.
//
// Entry syntax (spec, "Reading outside the workdir"):
//
//	"~/.leviath/runs"          exact path: grants its whole subtree
//	"../shared-docs"           relative: resolved against the run's workdir
//	"glob:~/design-docs/**"    glob: * stays in one component, ** crosses components
//	"regex:/data/archives/.*"  regex: anchored (^...$) and absolute
package readpaths

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Kind is an entry's syntax.
type Kind int

const (
	Exact Kind = iota
	Glob
	Regex
)

func (k Kind) String() string {
	return [...]string{"exact", "glob", "regex"}[k]
}

// Entry is one parsed [read_paths] entry, not yet bound to a home or workdir.
type Entry struct {
	Raw  string // as written, trimmed
	Kind Kind
	// Body is Raw without its "glob:"/"regex:" prefix.
	Body string
	// Relative entries resolve against the run's workdir.
	Relative bool
}

// canaries are paths in distinct top-level trees: an entry matching all of them grants
// the whole filesystem and is refused as a catch-all.
var canaries = []string{"/etc/shadow", "/root/.ssh/id_ed25519", "/var/lib/secret/key", "/proc/1/environ"}

// Parse validates one entry. Everything that can be checked without a workdir is checked
// here, so a bad entry fails when the blueprint or config is parsed, not at run time.
func Parse(raw string) (Entry, error) {
	s := strings.TrimSpace(raw)
	e := Entry{Raw: s}
	switch {
	case strings.HasPrefix(s, "glob:"):
		e.Kind, e.Body = Glob, strings.TrimPrefix(s, "glob:")
	case strings.HasPrefix(s, "regex:"):
		e.Kind, e.Body = Regex, strings.TrimPrefix(s, "regex:")
	default:
		e.Kind, e.Body = Exact, s
	}
	if e.Body == "" {
		return e, fmt.Errorf("read path %q: empty pattern", raw)
	}
	if strings.ContainsRune(e.Body, 0) {
		return e, fmt.Errorf("read path %q: NUL byte", raw)
	}
	switch e.Kind {
	case Exact:
		e.Relative = !isAbsLike(e.Body)
		if !e.Relative && cleanHome(e.Body) == "/" {
			return e, fmt.Errorf("read path %q: a catch-all (the whole filesystem) is refused", raw)
		}
	case Glob:
		e.Relative = !isAbsLike(e.Body)
		if err := checkGlobDots(e.Body, e.Relative); err != nil {
			return e, fmt.Errorf("read path %q: %w", raw, err)
		}
		if _, err := regexp.Compile(globToRegex(e.Body)); err != nil {
			return e, fmt.Errorf("read path %q: bad glob: %w", raw, err)
		}
		if !e.Relative && matchesAllCanaries(globToRegex(e.Body)) {
			return e, fmt.Errorf("read path %q: a catch-all glob (it matches every path) is refused", raw)
		}
	case Regex:
		if !isAbsLike(e.Body) {
			return e, fmt.Errorf("read path %q: a regex must be absolute (start with /, a drive letter, or ~/); a catch-all like regex:.* is refused; use glob: for paths relative to the workdir", raw)
		}
		if _, err := regexp.Compile(anchor(e.Body)); err != nil {
			return e, fmt.Errorf("read path %q: bad regex: %w", raw, err)
		}
		if matchesAllCanaries(anchor(e.Body)) {
			return e, fmt.Errorf("read path %q: a catch-all regex (it matches every path) is refused", raw)
		}
	}
	return e, nil
}

// ParseAll parses entries, naming the first bad one.
func ParseAll(raws []string) ([]Entry, error) {
	out := make([]Entry, 0, len(raws))
	for _, r := range raws {
		e, err := Parse(r)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Key is the form grants are compared in: the raw text with a "~/" home and redundant
// slashes normalised, so "~/x/" and "~/x" are the same grant.
func (e Entry) Key() string {
	body := e.Body
	if e.Kind == Exact {
		body = cleanHome(body)
	}
	switch e.Kind {
	case Glob:
		return "glob:" + body
	case Regex:
		return "regex:" + body
	}
	return body
}

func cleanHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return "~" + strings.TrimSuffix(path.Clean("/"+strings.TrimPrefix(p, "~")), "/")
	}
	if strings.HasPrefix(p, "/") {
		return path.Clean(p)
	}
	c := path.Clean(p)
	return c
}

func isAbsLike(p string) bool {
	if strings.HasPrefix(p, "/") || p == "~" || strings.HasPrefix(p, "~/") {
		return true
	}
	// A drive letter: accepted syntactically so a blueprint written on Windows parses.
	return len(p) >= 3 && p[1] == ':' && (p[2] == '/' || p[2] == '\\') &&
		((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= 'A' && p[0] <= 'Z'))
}

// checkGlobDots refuses "." and ".." components, except in a relative entry's leading
// run, which is folded into the workdir when the pattern is compiled.
func checkGlobDots(body string, relative bool) error {
	parts := strings.Split(body, "/")
	leading := relative
	for _, p := range parts {
		if leading && (p == "." || p == "..") {
			continue
		}
		leading = false
		if p == "." || p == ".." {
			return fmt.Errorf("a glob cannot contain %q (only a relative entry's leading ./ and ../ run is allowed)", p)
		}
	}
	return nil
}

func matchesAllCanaries(re string) bool {
	r, err := regexp.Compile(re)
	if err != nil {
		return false
	}
	for _, c := range canaries {
		if !r.MatchString(c) {
			return false
		}
	}
	return true
}

func anchor(re string) string { return "^(?:" + re + ")$" }

// globToRegex turns a glob over "/"-separated paths into an anchored regex. "*" and "?"
// stay within one component; "**" crosses components, and a trailing "/**" also matches
// the directory itself.
func globToRegex(g string) string {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(g); i++ {
		c := g[i]
		switch {
		case strings.HasPrefix(g[i:], "/**/"):
			b.WriteString("/(?:.*/)?")
			i += 3
		case strings.HasPrefix(g[i:], "/**") && i+3 == len(g):
			b.WriteString("(?:/.*)?")
			i += 2
		case strings.HasPrefix(g[i:], "**"):
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(g[i+1:], ']')
			if j < 0 {
				b.WriteString(`\[`)
				continue
			}
			class := g[i+1 : i+1+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return b.String()
}
