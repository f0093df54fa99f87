package readpaths

import (
	"fmt"
	"path"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/fspath"
)

// bound is one entry compiled against a home and workdir.
type bound struct {
	// dir is the deepest fixed directory every match lies in (or is): the fence indexes
	// the rule there, and the breadth rules judge the entry by it.
	dir string
	// open is false for a pattern that matches exactly one path (a glob or regex with no
	// wildcard); an exact entry grants its subtree, so it is open.
	open  bool
	exact string         // exact entries: the absolute path whose subtree is granted
	re    *regexp.Regexp // glob and regex entries
	inert bool           // drive-letter entries: no real path on this OS can match
}

// Placeholders for checks at parse time, when no home or workdir is known. The home's
// depth (2) keeps a "~/x" entry judged as it would be under a real home; relative entries
// are only syntax-checked before they are bound.
const (
	parseHome    = "/home/~"
	parseWorkdir = "/~workdir/~/~/~/~"
)

// checkUnbound runs every check that does not depend on the real home and workdir.
func (e Entry) checkUnbound() error {
	b, err := e.bind(parseHome, parseWorkdir)
	if err != nil || e.Relative || b.inert {
		return err
	}
	return b.checkBreadth(e, parseHome, strings.HasPrefix(e.canon, "~"))
}

// bindChecked compiles e for a run and applies the breadth rules with the real home.
func (e Entry) bindChecked(home, workdir string) (bound, error) {
	b, err := e.bind(home, workdir)
	if err != nil {
		return b, err
	}
	if b.inert {
		return b, nil
	}
	return b, b.checkBreadth(e, home, true)
}

// bind compiles the canonical form; it never looks at Raw, so entries with the same Key
// compile identically.
func (e Entry) bind(home, workdir string) (bound, error) {
	if isDrive(e.canon) {
		if e.Kind == Regex {
			if _, err := syntax.Parse(e.canon, syntax.Perl); err != nil {
				return bound{}, fmt.Errorf("bad regex: %w", err)
			}
		}
		return bound{inert: true}, nil
	}
	switch e.Kind {
	case Exact:
		p := bindPath(e.canon, home, workdir)
		return bound{dir: p, open: true, exact: p}, nil
	case Glob:
		base, parts := splitGlob(e.canon, home, workdir)
		body, err := globRegex(parts)
		if err != nil {
			return bound{}, err
		}
		return compileAnchored(regexp.QuoteMeta(base), body)
	default:
		prefix, body := "", e.canon
		if strings.HasPrefix(body, "~") {
			prefix, body = home, body[1:]
		}
		// The body must parse on its own first: "/data/a)|(.*" is refused here instead of
		// closing the wrapper's group early.
		if _, err := syntax.Parse(body, syntax.Perl); err != nil {
			return bound{}, fmt.Errorf("bad regex: %w", err)
		}
		b, err := compileAnchored(regexp.QuoteMeta(prefix), "(?:"+body+")")
		if err != nil {
			return bound{}, err
		}
		if err := checkPrefixComponents(b.dir); err != nil {
			return bound{}, err
		}
		return b, nil
	}
}

// compileAnchored compiles \A(?:prefix body)\z and proves from the parsed tree, not the
// text, that the whole path must match: the top node is a concatenation that begins with
// \A and ends with \z. The fixed directory is read off the same tree regexp compiles, so
// the index and the breadth rules judge exactly what is enforced.
func compileAnchored(prefix, body string) (bound, error) {
	text := `\A(?:` + prefix + body + `)\z`
	tree, err := syntax.Parse(text, syntax.Perl)
	if err != nil {
		return bound{}, fmt.Errorf("bad regex: %w", err)
	}
	subs := tree.Sub
	if tree.Op != syntax.OpConcat || len(subs) < 2 || subs[0].Op != syntax.OpBeginText || subs[len(subs)-1].Op != syntax.OpEndText {
		return bound{}, fmt.Errorf("the pattern cannot be anchored to the whole path")
	}
	var lit strings.Builder
	i := 1
	for ; i < len(subs)-1 && subs[i].Op == syntax.OpLiteral && subs[i].Flags&syntax.FoldCase == 0; i++ {
		lit.WriteString(string(subs[i].Rune))
	}
	re, err := regexp.Compile(text)
	if err != nil {
		return bound{}, fmt.Errorf("bad regex: %w", err)
	}
	b := bound{re: re, open: i < len(subs)-1}
	p := lit.String()
	switch {
	case !strings.HasPrefix(p, "/"):
		b.dir = "" // no fixed absolute start: judged a catch-all
	case !b.open:
		b.dir = p
	case slashFirst(subs[i:]):
		// "/data/x(?:/.*)?": whatever follows the literal starts a new component, so
		// every match is /data/x or lies under it.
		b.dir = p
	default:
		// "/data/x.*" also matches the sibling /data/xyz: only /data is fixed.
		b.dir = p[:strings.LastIndexByte(p, '/')]
		if b.dir == "" {
			b.dir = "/"
		}
	}
	return b, nil
}

// slashFirst reports whether every string the sequence matches is empty or begins with
// "/". It is conservative: a node it does not understand answers false, which only makes
// the fixed directory shallower (and the entry more likely to be refused), never wider.
func slashFirst(seq []*syntax.Regexp) bool {
	if len(seq) == 0 {
		return true
	}
	n, rest := seq[0], seq[1:]
	with := func(first ...*syntax.Regexp) []*syntax.Regexp {
		return append(append([]*syntax.Regexp{}, first...), rest...)
	}
	switch n.Op {
	case syntax.OpLiteral:
		return n.Flags&syntax.FoldCase == 0 && len(n.Rune) > 0 && n.Rune[0] == '/'
	case syntax.OpCharClass:
		return len(n.Rune) == 2 && n.Rune[0] == '/' && n.Rune[1] == '/'
	case syntax.OpEndText:
		return true // nothing can follow the end of the path
	case syntax.OpEmptyMatch:
		return slashFirst(rest)
	case syntax.OpCapture:
		return slashFirst(with(n.Sub[0]))
	case syntax.OpConcat:
		return slashFirst(with(n.Sub...))
	case syntax.OpAlternate:
		// Each branch judged alone, and the rest as if a branch could be empty: never
		// re-walking the rest once per branch keeps this linear in the tree's size.
		for _, a := range n.Sub {
			if !slashFirst([]*syntax.Regexp{a}) {
				return false
			}
		}
		return slashFirst(rest)
	case syntax.OpQuest, syntax.OpStar, syntax.OpPlus, syntax.OpRepeat:
		return slashFirst(n.Sub[:1]) && slashFirst(rest)
	}
	return false
}

// checkPrefixComponents refuses a regex whose fixed directory is not a clean path: real
// paths never contain "//", "." or "..", so such a prefix could never match as written
// and would only mislead whoever grants it.
func checkPrefixComponents(dir string) error {
	if dir == "" || dir == "/" {
		return nil
	}
	for _, c := range strings.Split(dir[1:], "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("its fixed prefix %s is not a clean path (%q): real paths never contain empty, . or .. components", dir, c)
		}
	}
	return nil
}

// checkBreadth is the structural too-broad rule, judged on the fixed directory (no path is
// sampled): an entry must start with at least one literal directory below /; a subtree or
// pattern must be rooted at least two directories deep (so no top-level directory is
// granted wholesale or by a pattern); nothing may reach the home directory itself or a
// directory that contains it.
func (b bound) checkBreadth(e Entry, home string, checkHome bool) error {
	kind := "entry"
	if e.Kind != Exact {
		kind = e.Kind.String()
	}
	switch {
	case b.dir == "" || b.dir == "/":
		if e.Kind == Exact {
			return fmt.Errorf("a catch-all (the whole filesystem) is refused")
		}
		return fmt.Errorf("a catch-all %s is refused: it has no fixed directory before its first wildcard, so it can match paths anywhere under / (start it with a literal directory, e.g. /data/archives/ or ~/docs/)", kind)
	case checkHome && b.dir == home:
		return fmt.Errorf("it reaches the whole home directory; name a directory inside it, e.g. ~/docs")
	case checkHome && fspath.Within(b.dir, home):
		return fmt.Errorf("it reaches %s, which contains the home directory %s; name a directory inside the home, e.g. ~/docs", b.dir, home)
	case b.open && strings.Count(b.dir, "/") < 2:
		return fmt.Errorf("it reaches the top-level directory %s as a whole or by pattern; a subtree or pattern must be rooted at least two directories deep (e.g. %s/<name>)", b.dir, b.dir)
	}
	return nil
}

// bindPath makes a canonical exact entry absolute: "~" is the home, relative entries join
// the workdir (their only ".." are the leading run, folded into the workdir).
func bindPath(canon, home, workdir string) string {
	switch {
	case canon == "~":
		return path.Clean(home)
	case strings.HasPrefix(canon, "~/"):
		return path.Clean(home + canon[1:])
	case strings.HasPrefix(canon, "/"):
		return canon
	}
	return path.Join(workdir, canon)
}

// splitGlob returns the literal base a canonical glob is rooted at (the home, "" for /,
// or the workdir with a relative entry's leading ../ run folded in) and its components.
func splitGlob(canon, home, workdir string) (base string, parts []string) {
	rest := canon
	switch {
	case canon == "~" || strings.HasPrefix(canon, "~/"):
		base, rest = strings.TrimSuffix(home, "/"), strings.TrimPrefix(canon, "~")
	case strings.HasPrefix(canon, "/"):
	default:
		base = workdir
		ps := strings.Split(canon, "/")
		i := 0
		for i < len(ps) && ps[i] == ".." {
			base = path.Dir(base)
			i++
		}
		if base == "/" {
			base = ""
		}
		rest = strings.Join(ps[i:], "/")
		if rest == "." {
			rest = ""
		}
	}
	for _, p := range strings.Split(rest, "/") {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return base, parts
}

// globRegex turns glob components into regex text (each component preceded by "/"). "*",
// "?" and classes never match "/"; a "**" component matches any number of components
// (zero included, so a trailing "/**" matches the directory itself); "**" inside a
// component crosses components too.
func globRegex(parts []string) (string, error) {
	var b strings.Builder
	for _, p := range parts {
		if p == "**" {
			b.WriteString(`(?:/(?s:.*))?`)
			continue
		}
		b.WriteString("/")
		for i := 0; i < len(p); {
			switch {
			case strings.HasPrefix(p[i:], "**"):
				b.WriteString(`(?s:.*)`)
				i += 2
			case p[i] == '*':
				b.WriteString(`[^/]*`)
				i++
			case p[i] == '?':
				b.WriteString(`[^/]`)
				i++
			case p[i] == '[' && strings.IndexByte(p[i+1:], ']') >= 0:
				j := strings.IndexByte(p[i+1:], ']')
				cls, err := globClass(p[i+1 : i+1+j])
				if err != nil {
					return "", err
				}
				b.WriteString(cls)
				i += j + 2
			default:
				r, n := utf8.DecodeRuneInString(p[i:])
				b.WriteString(regexp.QuoteMeta(string(r)))
				i += n
			}
		}
	}
	return b.String(), nil
}

// globClass compiles the inside of a glob class ("a-z", "!x", "^x") to a regex class that
// never matches "/": a negated class excludes it, and a class that names it (a range such
// as ".-0" spans it) is refused rather than silently narrowed.
func globClass(in string) (string, error) {
	neg := strings.HasPrefix(in, "!") || strings.HasPrefix(in, "^")
	body := in
	if neg {
		body = in[1:]
	}
	rs := []rune(body)
	if len(rs) == 0 {
		return "", fmt.Errorf("empty glob class [%s]", in)
	}
	var b strings.Builder
	b.WriteString("[")
	if neg {
		b.WriteString("^/")
	}
	for i := 0; i < len(rs); i++ {
		lo, hi := rs[i], rs[i]
		if i+2 < len(rs) && rs[i+1] == '-' {
			hi = rs[i+2]
			i += 2
		}
		if hi < lo {
			return "", fmt.Errorf("glob class [%s]: range %c-%c is backwards", in, lo, hi)
		}
		if !neg && lo <= '/' && '/' <= hi {
			return "", fmt.Errorf("glob class [%s] matches \"/\": a glob class never crosses a path separator", in)
		}
		fmt.Fprintf(&b, `\x{%x}-\x{%x}`, lo, hi)
	}
	b.WriteString("]")
	return b.String(), nil
}
