package readpaths

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
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
// has the same canonical form (Key). The fence compiles that same canonical form, so what
// is granted here is exactly what is enforced. A grant for something the blueprint does
// not declare opens nothing.
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

// GrantLine is the exact config.toml line that would grant the given entries to agent:
// the table's header and its key on one line, as lev's messages show it ("add to your
// config.toml: [agent_read_paths.cto] allow = ["~/docs"]"). Every string in it is a valid
// TOML basic string that reads back as the entry (tomlString). An entry or agent name
// that is not valid UTF-8, which no TOML file can hold, gets a sentence saying so instead
// of a line: Parse refuses such entries, so only a caller handing raw text gets it.
func GrantLine(agent string, raws []string) string {
	header, assign, err := grantTOML(agent, raws)
	if err != nil {
		return "(no config.toml line can grant it: " + err.Error() + ")"
	}
	return header + " " + assign
}

// grantTOML is GrantLine's table header and key-value line, each valid TOML on its own
// line.
func grantTOML(agent string, raws []string) (header, assign string, err error) {
	q := make([]string, len(raws))
	for i, r := range raws {
		if q[i], err = tomlString(r); err != nil {
			return "", "", fmt.Errorf("read path %q %w", r, err)
		}
	}
	list := "[" + strings.Join(q, ", ") + "]"
	if agent == "" {
		// A blueprint with no install name (run by its path) has no per-agent table.
		return "[security]", "read_paths = " + list, nil
	}
	key, err := tableKey(agent)
	if err != nil {
		return "", "", fmt.Errorf("agent name %q %w", agent, err)
	}
	return "[agent_read_paths." + key + "]", "allow = " + list, nil
}

// tableKey is s as a TOML key: bare when TOML allows it (ASCII letters, digits, _ and -),
// else quoted (an install name may hold a dot, which a bare key would split on).
func tableKey(s string) (string, error) {
	if s == "" {
		return tomlString(s)
	}
	for _, c := range s {
		if !(c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return tomlString(s)
		}
	}
	return s, nil
}

// tomlString quotes s as a TOML basic string that a TOML parser reads back as s. Go's %q
// is not one: its \x1b, \a and \v escapes are not TOML's (which has only \b \t \n \f \r
// \" \\ \uXXXX \UXXXXXXXX), and invalid UTF-8 comes out as \xff, which TOML does not
// read at all. Besides what TOML requires escaped (", \ and control characters), every
// character a terminal does not show as itself (C1 controls, bidi and zero-width format
// characters, separators, spaces other than U+0020) is escaped, so the line a person
// copies shows which path it grants. Invalid UTF-8 is an error: TOML text is UTF-8, so no
// escape or replacement would read back as the same bytes.
func tomlString(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", errors.New("is not valid UTF-8, which a TOML file cannot hold")
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			switch {
			case r != ' ' && !unicode.IsPrint(r):
				// Not printable: control (C0, DEL, C1) and format characters (bidi,
				// zero-width, U+FEFF), separators, spaces but U+0020, private and
				// unassigned code points.
				if r > 0xffff {
					fmt.Fprintf(&b, `\U%08x`, r)
				} else {
					fmt.Fprintf(&b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String(), nil
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
	st Status
	b  bound
}

// Match is the outcome of looking a real path up.
type Match struct {
	Status
	Found bool // some declared entry matches (granted or not)
}

// NewFence binds statuses to home and workdir (both real, absolute, "/"-separated). Each
// entry is compiled from its canonical form (the one grants were compared in) and judged
// again by the breadth rules now that the home and workdir are known: a relative entry, or
// a "~/" entry under an unusual home, can reach / or the home only once bound.
func NewFence(agent string, sts []Status, home, workdir string) (*Fence, error) {
	f := &Fence{agent: agent, byDir: map[string][]*rule{}}
	for _, st := range sts {
		b, err := st.Entry.bindChecked(home, workdir)
		if err != nil {
			return nil, fmt.Errorf("read path %q (home %s, workdir %s): %w", st.Entry.Raw, home, workdir, err)
		}
		if b.inert {
			continue
		}
		f.byDir[b.dir] = append(f.byDir[b.dir], &rule{st: st, b: b})
		f.n++
	}
	return f, nil
}

// Check binds the non-relative entries to home and applies the breadth rules, so lev
// validate refuses what a run would (relative entries need the run's workdir).
func Check(es []Entry, home string) error {
	for _, e := range es {
		if e.Relative {
			continue
		}
		if _, err := e.bindChecked(home, "/"); err != nil {
			return fmt.Errorf("read path %q (home %s): %w", e.Raw, home, err)
		}
	}
	return nil
}

// Len is the number of entries.
func (f *Fence) Len() int { return f.n }

// Match looks up a real (symlink-resolved, absolute, clean) path. A granted entry wins over
// an ungranted one, so the refusal message can name a declared-but-ungranted entry only
// when nothing grants the path. A path that is not absolute and clean matches nothing:
// patterns are written for real paths, and "a/../b" is not one.
func (f *Fence) Match(real string) Match {
	if !path.IsAbs(real) || path.Clean(real) != real {
		return Match{}
	}
	var ungranted *rule
	for dir := real; ; dir = path.Dir(dir) {
		for _, r := range f.byDir[dir] {
			if !r.b.matches(real) {
				continue
			}
			if r.st.Granted {
				return Match{Status: r.st, Found: true}
			}
			if ungranted == nil {
				ungranted = r
			}
		}
		if dir == "/" {
			break
		}
	}
	if ungranted != nil {
		return Match{Status: ungranted.st, Found: true}
	}
	return Match{}
}

func (b bound) matches(p string) bool {
	if b.re != nil {
		return b.re.MatchString(p)
	}
	return p == b.exact || strings.HasPrefix(p, b.exact) && p[len(b.exact)] == '/'
}
