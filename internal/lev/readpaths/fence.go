package readpaths

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Grants are the read-path grants of the user's config.toml.
type Grants struct {
	// Agent is [agent_read_paths.NAME] allow, by agent name.
	Agent map[string][]Entry
	// Security is [security] read_paths, for any agent that declares them.
	Security []Entry
	// AllowBlueprint is [security] allow_blueprint_read_paths: every declaration granted.
	AllowBlueprint bool
}

// Status says whether one declared entry is granted, and by what.
type Status struct {
	Entry   Entry
	Granted bool
	By      string // the config line's table, empty when not granted
}

// Resolve compares patterns, not paths on disk: a grant applies to a declared entry when it
// is the same entry (after normalising "~/" and slashes). A grant for something the
// blueprint does not declare opens nothing.
func Resolve(agent string, declared []Entry, g Grants) []Status {
	out := make([]Status, 0, len(declared))
	agentKeys := keys(g.Agent[agent])
	secKeys := keys(g.Security)
	for _, d := range declared {
		st := Status{Entry: d}
		switch {
		case agentKeys[d.Key()]:
			st.Granted, st.By = true, "[agent_read_paths."+agent+"]"
		case secKeys[d.Key()]:
			st.Granted, st.By = true, "[security] read_paths"
		case g.AllowBlueprint:
			st.Granted, st.By = true, "[security] allow_blueprint_read_paths"
		}
		out = append(out, st)
	}
	return out
}

func keys(es []Entry) map[string]bool {
	m := make(map[string]bool, len(es))
	for _, e := range es {
		m[e.Key()] = true
	}
	return m
}

// GrantLine is the exact config.toml line that would grant the given entries to agent.
func GrantLine(agent string, raws []string) string {
	q := make([]string, len(raws))
	for i, r := range raws {
		q[i] = fmt.Sprintf("%q", r)
	}
	if agent == "" {
		// A blueprint with no install name (run by its path) has no per-agent table.
		return fmt.Sprintf("[security] read_paths = [%s]", strings.Join(q, ", "))
	}
	return fmt.Sprintf("[agent_read_paths.%s] allow = [%s]", tableKey(agent), strings.Join(q, ", "))
}

func tableKey(s string) string {
	for _, c := range s {
		if !(c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

// Fence matches real paths against one run's declared entries, bound to its home and
// workdir. It is immutable and safe for concurrent use.
type Fence struct {
	agent string
	// byDir indexes every rule under the deepest directory all its matches lie under, so a
	// lookup walks the path's ancestors instead of every entry.
	byDir map[string][]*rule
	n     int
}

type rule struct {
	st    Status
	exact string         // exact and relative-exact entries: the absolute path
	re    *regexp.Regexp // glob and regex entries
}

// Match is the outcome of looking a real path up.
type Match struct {
	Status
	Found bool // some declared entry matches (granted or not)
}

// NewFence binds statuses to home and workdir (both real, absolute, "/"-separated).
func NewFence(agent string, sts []Status, home, workdir string) (*Fence, error) {
	f := &Fence{agent: agent, byDir: map[string][]*rule{}}
	for _, st := range sts {
		r := &rule{st: st}
		var dir string
		switch st.Entry.Kind {
		case Exact:
			r.exact = bindPath(st.Entry.Body, home, workdir)
			// Parse can only refuse "/" written as such: "../../.." (or "~" with a home
			// of /) reaches the root only once bound.
			if r.exact == "/" {
				return nil, fmt.Errorf("read path %q: resolves to / from workdir %s: a catch-all (the whole filesystem) is refused", st.Entry.Raw, workdir)
			}
			dir = r.exact
		case Glob:
			base, rest := splitGlobBase(st.Entry.Body, home, workdir)
			re, err := regexp.Compile("^" + regexp.QuoteMeta(base) + globBody(rest) + "$")
			if err != nil {
				return nil, fmt.Errorf("read path %q: %w", st.Entry.Raw, err)
			}
			r.re = re
			dir = literalDir(base, rest, "*?[\\")
		case Regex:
			base, rest := "", st.Entry.Body
			if strings.HasPrefix(rest, "~") {
				base, rest = home, strings.TrimPrefix(rest, "~")
			}
			re, err := regexp.Compile("^(?:" + regexp.QuoteMeta(base) + rest + ")$")
			if err != nil {
				return nil, fmt.Errorf("read path %q: %w", st.Entry.Raw, err)
			}
			r.re = re
			if strings.Contains(rest, "|") {
				dir = "/" // an alternation can leave any prefix: check it for every path
			} else {
				dir = literalDir(base, rest, `.*+?()[]{}|^$\`)
			}
		}
		// Parse checks only absolute patterns; a relative glob (or one under a home of /)
		// becomes a catch-all only once bound, so every compiled pattern is checked here.
		if r.re != nil && matchesAllCanaries(r.re.String()) {
			return nil, fmt.Errorf("read path %q: compiles to %s from workdir %s, which matches every path: a catch-all is refused", st.Entry.Raw, r.re, workdir)
		}
		f.byDir[dir] = append(f.byDir[dir], r)
		f.n++
	}
	return f, nil
}

// Len is the number of entries.
func (f *Fence) Len() int { return f.n }

// Match looks up a real (symlink-resolved, absolute, clean) path. A granted entry wins over
// an ungranted one, so the refusal message can name a declared-but-ungranted entry only
// when nothing grants the path.
func (f *Fence) Match(real string) Match {
	var ungranted *rule
	for dir := real; ; dir = path.Dir(dir) {
		for _, r := range f.byDir[dir] {
			if !r.matches(real) {
				continue
			}
			if r.st.Granted {
				return Match{Status: r.st, Found: true}
			}
			if ungranted == nil {
				ungranted = r
			}
		}
		if dir == "/" || dir == "." {
			break
		}
	}
	if ungranted != nil {
		return Match{Status: ungranted.st, Found: true}
	}
	return Match{}
}

func (r *rule) matches(p string) bool {
	if r.re != nil {
		return r.re.MatchString(p)
	}
	return p == r.exact || strings.HasPrefix(p, r.exact) && (r.exact == "/" || p[len(r.exact)] == '/')
}

// bindPath makes an exact entry absolute: "~" is the home, relative entries join the
// workdir.
func bindPath(body, home, workdir string) string {
	switch {
	case body == "~":
		return home
	case strings.HasPrefix(body, "~/"):
		return path.Clean(home + body[1:])
	case strings.HasPrefix(body, "/"):
		return path.Clean(body)
	}
	return path.Join(workdir, body)
}

// splitGlobBase returns the literal base a glob is rooted at (home, or the workdir with a
// relative entry's leading ./ and ../ run folded in) and the rest of the pattern.
func splitGlobBase(body, home, workdir string) (base, rest string) {
	switch {
	case strings.HasPrefix(body, "~/"):
		return home, body[1:]
	case strings.HasPrefix(body, "/"):
		return "", body
	}
	parts := strings.Split(body, "/")
	i := 0
	for i < len(parts) && (parts[i] == "." || parts[i] == "..") {
		i++
	}
	base = path.Join(append([]string{workdir}, parts[:i]...)...)
	if base == "/" {
		base = ""
	}
	return base, "/" + strings.Join(parts[i:], "/")
}

// literalDir is the deepest directory every match must lie under: base plus the literal
// run of rest up to its last "/" before the first metacharacter.
func literalDir(base, rest, metas string) string {
	lit := rest
	if i := strings.IndexAny(rest, metas); i >= 0 {
		lit = rest[:i]
	}
	full := base + lit
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		full = full[:i]
	}
	if full == "" {
		return "/"
	}
	return path.Clean(full)
}

// globBody converts a glob (starting with "/" or empty) to regex text, unanchored.
func globBody(g string) string {
	re := globToRegex(g)
	return re[1 : len(re)-1]
}
