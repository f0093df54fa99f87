// Package readpaths implements the read-path fence: the [read_paths] entries a blueprint
// declares, the grants in the user's config.toml, and matching a symlink-resolved real path
// against the entries that are both declared and granted.
//
// Entry syntax (docs/lev.md, "The read-path fence"):
//
//	"~/.leviath/runs"          exact path: grants its whole subtree
//	"../shared-docs"           relative: resolved against the run's workdir
//	"glob:~/design-docs/**"    glob: * stays in one component, ** crosses components
//	"regex:/data/archives/.*"  regex: anchored (^...$) and absolute
//
// Every entry has ONE canonical form, computed by Parse. Granting compares canonical forms
// (Key) and enforcement compiles the canonical form, never the text as written, so a
// spelling cannot be read one way when granting and another way when reading.
//
// It owns the entry syntax, the canonical form and the matching. It must not judge a path
// as written: callers (workfs) hand it the symlink-resolved real path.
package readpaths

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
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
	Raw  string // as written, trimmed: what messages and suggested config lines show
	Kind Kind
	// Relative entries resolve against the run's workdir.
	Relative bool
	// canon is the canonical body (no "glob:"/"regex:" prefix). Exact and glob entries:
	// "~", "/" or the relative leading "../" run, then the components joined by single
	// slashes, with empty components, trailing slashes and "." dropped. Regex entries: the
	// body as written (regex equivalence is undecidable, so only the same text grants).
	canon string
}

// Parse validates one entry. Everything that can be checked without a workdir is checked
// here, so a bad entry fails when the blueprint or config is parsed, not at run time.
func Parse(raw string) (Entry, error) {
	s := strings.TrimSpace(raw)
	e := Entry{Raw: s}
	body := s
	switch {
	case strings.HasPrefix(s, "glob:"):
		e.Kind, body = Glob, strings.TrimPrefix(s, "glob:")
	case strings.HasPrefix(s, "regex:"):
		e.Kind, body = Regex, strings.TrimPrefix(s, "regex:")
	}
	if body == "" {
		return e, fmt.Errorf("read path %q: empty pattern", raw)
	}
	if err := checkChars(body); err != nil {
		return e, fmt.Errorf("read path %q: %w", raw, err)
	}
	switch e.Kind {
	case Exact, Glob:
		c, rel, err := canonPath(body, e.Kind)
		if err != nil {
			return e, fmt.Errorf("read path %q: %w", raw, err)
		}
		e.canon, e.Relative = c, rel
	case Regex:
		if !isAbsLike(body) {
			return e, fmt.Errorf("read path %q: a regex must be absolute (start with /, a drive letter, or ~/); a catch-all like regex:.* is refused; use glob: for paths relative to the workdir", raw)
		}
		e.canon = body
	}
	if err := e.checkUnbound(); err != nil {
		return e, fmt.Errorf("read path %q: %w", raw, err)
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

// Key is the form grants are compared in: the kind and the canonical body. Two entries
// with the same Key compile to the same rule (the rule is built from the canonical body
// alone), which is what makes "granted" and "enforced" agree.
func (e Entry) Key() string {
	switch e.Kind {
	case Glob:
		return "glob:" + e.canon
	case Regex:
		return "regex:" + e.canon
	}
	return e.canon
}

// checkChars refuses bytes a real path cannot sensibly carry in a config file: NUL (the
// kernel cuts a path there), control and format characters (a newline or a right-to-left
// override would make the entry lev validate shows, and the grant line it suggests, look
// like another path than the one enforced), and invalid UTF-8 (regexp reads it as U+FFFD,
// so a pattern and the path it was copied from would disagree).
func checkChars(body string) error {
	if !utf8.ValidString(body) {
		return fmt.Errorf("not valid UTF-8")
	}
	for _, r := range body {
		if r == 0 {
			return fmt.Errorf("NUL byte")
		}
		if !unicode.IsGraphic(r) {
			return fmt.Errorf("non-printable character %U", r)
		}
	}
	return nil
}

// canonPath canonicalises an exact or glob body. "." and ".." are refused everywhere but
// a relative entry's leading run: "~/../x" or "/data/../etc" would be matched lexically
// when granting but mean something else once bound (and "..", lexically, ignores
// symlinks), so there is no spelling whose two readings could differ.
func canonPath(body string, k Kind) (canon string, relative bool, err error) {
	if isDrive(body) {
		// Accepted so a blueprint written on Windows parses; lev runs on Linux, where
		// no real path starts with a drive letter, so the entry is inert (bind).
		return body, false, nil
	}
	root, rest := "", body
	switch {
	case body == "~" || strings.HasPrefix(body, "~/"):
		root, rest = "~", body[1:]
	case strings.HasPrefix(body, "/"):
		root = "/"
	default:
		relative = true
	}
	var parts []string
	leading := relative
	for _, c := range strings.Split(rest, "/") {
		switch {
		case c == "":
			continue // "//" and a trailing "/" name the same path
		case leading && c == ".":
			continue
		case leading && c == "..":
			parts = append(parts, c)
			continue
		case c == "." || c == "..":
			if k == Glob {
				return "", false, fmt.Errorf("a glob cannot contain %q (only a relative entry's leading ./ and ../ run is allowed)", c)
			}
			return "", false, fmt.Errorf("a path cannot contain %q (only a relative entry's leading ./ and ../ run is allowed; elsewhere it would be read one way when granting and another when reading)", c)
		}
		leading = false
		parts = append(parts, c)
	}
	joined := strings.Join(parts, "/")
	switch root {
	case "~":
		if joined == "" {
			return "~", false, nil
		}
		return "~/" + joined, false, nil
	case "/":
		return "/" + joined, false, nil
	}
	if joined == "" {
		return ".", true, nil
	}
	return joined, true, nil
}

func isAbsLike(p string) bool {
	return strings.HasPrefix(p, "/") || p == "~" || strings.HasPrefix(p, "~/") || isDrive(p)
}

// isDrive reports a Windows drive-letter path ("C:/x", `C:\x`).
func isDrive(p string) bool {
	return len(p) >= 3 && p[1] == ':' && (p[2] == '/' || p[2] == '\\') &&
		((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= 'A' && p[0] <= 'Z'))
}
