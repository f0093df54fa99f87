package readpaths

import (
	"path"
	"strings"
	"testing"
)

const (
	fzHome = "/home/u"
	fzWd   = "/home/u/p/wd"
)

// globRef is an independent reading of a glob without "**": the path has as many
// components as the pattern and each component matches by path.Match, which cannot cross
// "/" because a component has none. ok is false when the reference does not apply.
func globRef(e Entry, p string) (match, ok bool) {
	if e.Kind != Glob || strings.Contains(e.canon, "**") || strings.Contains(e.canon, `\`) {
		return false, false
	}
	base, parts := splitGlob(e.canon, fzHome, fzWd)
	want := strings.Split(strings.TrimPrefix(base, "/"), "/")
	if base == "" {
		want = nil
	}
	for _, q := range parts {
		if strings.HasPrefix(q, "[!") || strings.Contains(q, "[!") {
			q = strings.ReplaceAll(q, "[!", "[^")
		}
		want = append(want, q)
	}
	if !path.IsAbs(p) || path.Clean(p) != p {
		return false, true
	}
	got := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if p == "/" {
		got = nil
	}
	if len(got) != len(want) {
		// Still check the pattern is well formed for path.Match.
		for _, w := range want {
			if _, err := path.Match(w, ""); err != nil {
				return false, false
			}
		}
		return false, true
	}
	match = true
	for i := range want {
		m, err := path.Match(want[i], got[i])
		if err != nil {
			return false, false
		}
		match = match && m
	}
	return match, true
}

// respell writes an exact or glob entry another way that must mean the same: doubled
// slashes, a trailing slash, surrounding space, a "./" in a relative entry's leading run.
func respell(e Entry) []string {
	if e.Kind == Regex || isDrive(e.canon) {
		return nil
	}
	prefix := map[Kind]string{Exact: "", Glob: "glob:"}[e.Kind]
	c := e.canon
	out := []string{
		prefix + strings.ReplaceAll(c, "/", "//"),
		prefix + c + "/",
	}
	if e.Relative {
		out = append(out, prefix+"./"+c)
	}
	for i, v := range out {
		if strings.TrimSpace(v) != v {
			out[i] = v + "/" // keep a component's own trailing space from being trimmed
		}
	}
	if strings.TrimSpace(c) == c {
		out = append(out, "  "+prefix+c+" ")
	}
	return out
}

// FuzzGrantAgreesWithEnforcement: for random entries and paths,
//   - a spelling that grants an entry (same Key) enforces exactly what the entry enforces;
//   - a spelling with a different Key is not a grant for it;
//   - every match lies under the entry's fixed directory, which obeys the breadth rules;
//   - "~/" entries never match outside the home;
//   - globs without "**" agree with a component-wise path.Match reference (so no class,
//     "*" or "?" matches "/").
func FuzzGrantAgreesWithEnforcement(f *testing.F) {
	for _, s := range [][2]string{
		{"~/../X", "/home/X"}, {"~/docs", "/home/u/docs/a"}, {"~//docs/", "/home/u/docs"},
		{"regex:/data/a)|(.*", "/etc/shadow"}, {"regex:/data/x/.*", "/data/x/y"},
		{"glob:~/pub/a[!x]*", "/home/u/pub/a/secret"}, {"glob:~/pub/a[^x]*", "/home/u/pub/ab"},
		{"glob:/data/x/[.-0]", "/data/x//"}, {"regex:/[^x].*", "/etc/shadow"}, {"glob:/*/**", "/etc/x"},
		{"regex:/(.*)", "/root/.ssh/id_rsa"}, {"~/..", "/home"}, {"../shared", "/home/u/p/shared/x"},
		{"glob:../n/*.md", "/home/u/p/n/a.md"}, {"glob:~/d/**/*.md", "/home/u/d/x/y.md"},
		{"regex:~/logs/[0-9]+\\.log", "/home/u/logs/1.log"}, {"glob:/data/x/?", "/data/x/\n"},
		{`regex:/data/x/\Q)|(.*`, "/x"}, {"glob:~/a/[a-c]?/*", "/home/u/a/b//c"}, {"0 /", "0"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, raw, p string) {
		e, err := Parse(raw)
		if err != nil {
			return
		}
		decl := []Status{{Entry: e, Granted: true}}
		fe, ferr := NewFence("a", decl, fzHome, fzWd)
		paths := []string{p, fzHome + "/" + p, "/data/x/" + p, fzWd + "/" + p}
		if ferr == nil {
			b, err := e.bindChecked(fzHome, fzWd)
			if err != nil {
				t.Fatalf("NewFence accepted %q but bindChecked says %v", raw, err)
			}
			for _, q := range paths {
				m := fe.Match(q)
				if m.Found != m.Granted {
					t.Fatalf("%q on %q: found %v granted %v", raw, q, m.Found, m.Granted)
				}
				if !m.Found {
					if ref, ok := globRef(e, q); ok && ref {
						t.Fatalf("%q: reference matches %q, fence does not", raw, q)
					}
					continue
				}
				if q != path.Clean(q) || !path.IsAbs(q) {
					t.Fatalf("%q matched an unclean path %q", raw, q)
				}
				if b.inert || !(q == b.dir || strings.HasPrefix(q, b.dir+"/")) {
					t.Fatalf("%q matched %q outside its fixed directory %q", raw, q, b.dir)
				}
				if b.dir == "/" || b.dir == fzHome || strings.HasPrefix(fzHome, b.dir+"/") || (b.open && strings.Count(b.dir, "/") < 2) {
					t.Fatalf("%q bound with a too-broad fixed directory %q", raw, b.dir)
				}
				if strings.HasPrefix(e.canon, "~") && !strings.HasPrefix(q, fzHome+"/") {
					t.Fatalf("%q matched %q outside the home", raw, q)
				}
				if ref, ok := globRef(e, q); ok && !ref {
					t.Fatalf("%q matched %q; the component-wise reference does not", raw, q)
				}
			}
		}
		for _, v := range respell(e) {
			g, err := Parse(v)
			if err != nil {
				t.Fatalf("%q parses but its respelling %q does not: %v", raw, v, err)
			}
			if isDrive(g.canon) {
				continue // "A:" is a relative name; "A:/" a drive letter, inert on Linux
			}
			st := Resolve("a", []Entry{e}, Grants{Agent: map[string][]Entry{"a": {g}}})
			if !st[0].Granted {
				t.Fatalf("%q is not granted by its respelling %q (keys %q, %q)", raw, v, e.Key(), g.Key())
			}
			fg, gerr := NewFence("a", []Status{{Entry: g, Granted: true}}, fzHome, fzWd)
			if (gerr == nil) != (ferr == nil) {
				t.Fatalf("%q binds: %v; its respelling %q binds: %v", raw, ferr, v, gerr)
			}
			if ferr != nil {
				continue
			}
			for _, q := range paths {
				if fe.Match(q).Granted != fg.Match(q).Granted {
					t.Fatalf("%q and its grant %q disagree on %q", raw, v, q)
				}
			}
		}
		// A grant with another Key grants nothing.
		if other, err := Parse(raw + "x"); err == nil && other.Key() != e.Key() {
			if st := Resolve("a", []Entry{e}, Grants{Security: []Entry{other}}); st[0].Granted {
				t.Fatalf("%q granted by %q", raw, raw+"x")
			}
		}
	})
}
