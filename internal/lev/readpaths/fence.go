package readpaths

import (
	"fmt"
	"path"
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
