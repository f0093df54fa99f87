package readpaths

import (
	"testing"
)

// TestParseRefuses: every spelling docs/lev.md ("The read-path fence") refuses, and its variants, refused when the
// blueprint or config is parsed, with the exact message (which names the entry).
func TestParseRefuses(t *testing.T) {
	const (
		dots      = `a path cannot contain ".." (only a relative entry's leading ./ and ../ run is allowed; elsewhere it would be read one way when granting and another when reading)`
		dot       = `a path cannot contain "." (only a relative entry's leading ./ and ../ run is allowed; elsewhere it would be read one way when granting and another when reading)`
		globDots  = `a glob cannot contain ".." (only a relative entry's leading ./ and ../ run is allowed)`
		catchGlob = `a catch-all glob is refused: it has no fixed directory before its first wildcard, so it can match paths anywhere under / (start it with a literal directory, e.g. /data/archives/ or ~/docs/)`
		catchRe   = `a catch-all regex is refused: it has no fixed directory before its first wildcard, so it can match paths anywhere under / (start it with a literal directory, e.g. /data/archives/ or ~/docs/)`
		homeAll   = `it reaches the whole home directory; name a directory inside it, e.g. ~/docs`
		notAbs    = `a regex must be absolute (start with /, a drive letter, or ~/); a catch-all like regex:.* is refused; use glob: for paths relative to the workdir`
	)
	top := func(d string) string {
		return "it reaches the top-level directory " + d + " as a whole or by pattern; a subtree or pattern must be rooted at least two directories deep (e.g. " + d + "/<name>)"
	}
	cases := []struct{ name, entry, msg string }{
		// ~/../X was granted as ~/X but read as home/../X.
		{"home dot-dot", "~/../X", dots},
		{"home dot-dot alone", "~/..", dots},
		{"home dot-dot deeper", "~/docs/../../X", dots},
		{"home dot", "~/./docs", dot},
		{"absolute dot-dot", "/data/../etc", dots},
		{"relative dot-dot after a name", "../x/../../y", dots},
		{"glob home dot-dot", "glob:~/../X/**", globDots},
		{"glob dot-dot mid-path", "glob:../shared/../../x", globDots},
		// A ")" escaped the textual ^(?:...)$ wrapper.
		{"regex paren escape", "regex:/data/a)|(.*", "bad regex: error parsing regexp: unexpected ): `/data/a)|(.*`"},
		{"regex paren escape, narrow", "regex:/data/a)|(/etc/shadow", "bad regex: error parsing regexp: unexpected ): `/data/a)|(/etc/shadow`"},
		{"regex \\Q swallowing the wrapper", `regex:/data/x/\Q)|(.*`, "bad regex: error parsing regexp: missing closing ): `\\A(?:(?:/data/x/\\Q)|(.*))\\z`"},
		{"regex unclosed group", "regex:/data/(", "bad regex: error parsing regexp: missing closing ): `/data/(`"},
		// Near-catch-alls that sampled paths let through.
		{"regex [^x]", "regex:/[^x].*", catchRe},
		{"regex capture", "regex:/(.*)", catchRe},
		{"regex top-level alternation", "regex:/data/x$|/etc/.*", catchRe},
		{"regex alternation of subtrees", "regex:/a/x|/b/y", catchRe},
		{"regex prefix not a whole component", "regex:/dat.*", catchRe},
		{"regex case-folded prefix", "regex:/(?i)data/x/.*", catchRe},
		{"regex catch-all", "regex:/.*", catchRe},
		{"glob /**", "glob:/**", catchGlob},
		{"glob /*/**", "glob:/*/**", catchGlob},
		{"glob /[!x]*/**", "glob:/[!x]*/**", catchGlob},
		{"glob /?*/**", "glob:/?*/**", catchGlob},
		{"exact /", "/", "a catch-all (the whole filesystem) is refused"},
		{"exact // spelled twice", "//", "a catch-all (the whole filesystem) is refused"},
		{"regex not absolute", "regex:.*", notAbs},
		{"regex starting with a group", "regex:(/.*)", notAbs},
		{"regex starting with \\A", `regex:\A/data/x`, notAbs},
		// A top-level directory wholesale or by pattern; the home directory itself.
		{"exact top-level", "/etc", top("/etc")},
		{"glob top-level listing", "glob:/etc/*", top("/etc")},
		{"regex top-level subtree", "regex:/etc/.*", top("/etc")},
		{"regex top-level near-subtree", "regex:/etc/[^x].*", top("/etc")},
		{"exact home", "~", homeAll},
		{"exact home with slash", "~/", homeAll},
		{"exact home spelled ~//", "~//", homeAll},
		{"glob home subtree", "glob:~/**", homeAll},
		{"glob home any dir", "glob:~/*/**", homeAll},
		{"glob home files", "glob:~/*.md", homeAll},
		{"regex home subtree", "regex:~/.*", homeAll},
		{"regex home exactly", "regex:~", homeAll},
		{"regex home sibling prefix", "regex:~/.ss.*", homeAll},
		// Glob classes that would match "/".
		{"glob class range spanning /", "glob:/data/x/[.-0]", `glob class [.-0] matches "/": a glob class never crosses a path separator`},
		{"glob empty class", "glob:/data/x/[]", "empty glob class []"},
		{"glob backwards range", "glob:/data/x/[z-a]", "glob class [z-a]: range z-a is backwards"},
		// A regex prefix no real path can have.
		{"regex prefix with //", "regex:/data//x/.*", `its fixed prefix /data//x is not a clean path (""): real paths never contain empty, . or .. components`},
		{"regex prefix with literal ..", `regex:/data/x/\.\./y/.*`, `its fixed prefix /data/x/../y is not a clean path (".."): real paths never contain empty, . or .. components`},
		{"regex literal with trailing /", "regex:/data/runs/", `its fixed prefix /data/runs/ is not a clean path (""): real paths never contain empty, . or .. components`},
		// Bytes.
		{"NUL", "/data/x\x00y", "NUL byte"},
		{"newline inside", "/data/x\ny", "non-printable character U+000A"},
		{"right-to-left override", "~/docs/\u202etxt.exe", "non-printable character U+202E"},
		{"zero-width space", "~/do\u200bcs", "non-printable character U+200B"},
		{"invalid UTF-8", "/data/x\xff", "not valid UTF-8"},
		{"empty", "glob:", "empty pattern"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.entry)
			want := "read path " + quoteGo(tc.entry) + ": " + tc.msg
			if err == nil || err.Error() != want {
				t.Fatalf("Parse(%q) = %v\nwant %s", tc.entry, err, want)
			}
		})
	}
}

// TestNewFenceBreadth: entries that become too broad only once bound to the real home or
// workdir are refused when the fence is built; legitimate ones bind.
func TestNewFenceBreadth(t *testing.T) {
	const wdOut = "/srv/a/b/wd" // a workdir outside the home
	cases := []struct {
		name, entry, home, wd string
		want                  string // the whole error; empty means accepted
	}{
		{"relative exact reaching /", "../../../../../../..", "/home/u", wdOut,
			`read path "../../../../../../.." (home /home/u, workdir /srv/a/b/wd): a catch-all (the whole filesystem) is refused`},
		{"relative exact exactly reaching /", "../../../..", "/home/u", wdOut,
			`read path "../../../.." (home /home/u, workdir /srv/a/b/wd): a catch-all (the whole filesystem) is refused`},
		{"relative exact reaching / with a trailing slash", "../../../../", "/home/u", wdOut,
			`read path "../../../../" (home /home/u, workdir /srv/a/b/wd): a catch-all (the whole filesystem) is refused`},
		{"relative exact reaching a top-level dir", "../../..", "/home/u", wdOut,
			`read path "../../.." (home /home/u, workdir /srv/a/b/wd): it reaches the top-level directory /srv as a whole or by pattern; a subtree or pattern must be rooted at least two directories deep (e.g. /srv/<name>)`},
		{"relative exact reaching the home", "..", "/home/u", "/home/u/wd",
			`read path ".." (home /home/u, workdir /home/u/wd): it reaches the whole home directory; name a directory inside it, e.g. ~/docs`},
		{"relative exact reaching a parent of the home", "../..", "/home/u", "/home/u/wd",
			`read path "../.." (home /home/u, workdir /home/u/wd): it reaches /home, which contains the home directory /home/u; name a directory inside the home, e.g. ~/docs`},
		{"relative glob reaching /", "glob:../../../../../../**", "/home/u", wdOut,
			`read path "glob:../../../../../../**" (home /home/u, workdir /srv/a/b/wd): a catch-all glob is refused: it has no fixed directory before its first wildcard, so it can match paths anywhere under / (start it with a literal directory, e.g. /data/archives/ or ~/docs/)`},
		{"relative glob any top dir", "glob:../../../../*/**", "/home/u", wdOut,
			`read path "glob:../../../../*/**" (home /home/u, workdir /srv/a/b/wd): a catch-all glob is refused: it has no fixed directory before its first wildcard, so it can match paths anywhere under / (start it with a literal directory, e.g. /data/archives/ or ~/docs/)`},
		{"relative glob over the home", "glob:../*/**", "/home/u", "/home/u/wd",
			`read path "glob:../*/**" (home /home/u, workdir /home/u/wd): it reaches the whole home directory; name a directory inside it, e.g. ~/docs`},
		{"home of / makes ~/docs top-level", "~/docs", "/", wdOut,
			`read path "~/docs" (home /, workdir /srv/a/b/wd): it reaches the top-level directory /docs as a whole or by pattern; a subtree or pattern must be rooted at least two directories deep (e.g. /docs/<name>)`},
		{"the home spelled absolutely", "/srv/root", "/srv/root", wdOut,
			`read path "/srv/root" (home /srv/root, workdir /srv/a/b/wd): it reaches the whole home directory; name a directory inside it, e.g. ~/docs`},
		{"a parent of the home spelled absolutely", "regex:/srv/home/[a-z]+/.*", "/srv/home/u", wdOut,
			`read path "regex:/srv/home/[a-z]+/.*" (home /srv/home/u, workdir /srv/a/b/wd): it reaches /srv/home, which contains the home directory /srv/home/u; name a directory inside the home, e.g. ~/docs`},
		{"glob parent of the home", "glob:/srv/home/*/.ssh/*", "/srv/home/u", wdOut,
			`read path "glob:/srv/home/*/.ssh/*" (home /srv/home/u, workdir /srv/a/b/wd): it reaches /srv/home, which contains the home directory /srv/home/u; name a directory inside the home, e.g. ~/docs`},
		// Positive controls: legitimate entries still bind.
		{"relative exact sibling", "../shared-docs", "/home/u", "/home/u/proj/wd", ""},
		{"relative exact two up, still two deep", "../..", "/home/u", wdOut, ""},
		{"relative glob sibling", "glob:../notes/*.md", "/home/u", "/home/u/proj/wd", ""},
		{"relative glob ancestor two deep", "glob:../../**", "/home/u", wdOut, ""},
		{"home glob", "glob:~/design-docs/**", "/home/u", wdOut, ""},
		{"home regex", "regex:~/logs/[0-9]+\\.log", "/home/u", wdOut, ""},
		{"regex one literal path at top level", "regex:/data", "/home/u", wdOut, ""},
		{"the workdir itself", ".", "/home/u", "/home/u/proj/wd", ""},
		{"drive letter: inert on Linux", "glob:C:/x/**", "/home/u", wdOut, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Parse(tc.entry)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			f, err := NewFence("a", []Status{{Entry: e, Granted: true}}, tc.home, tc.wd)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("legit entry refused: %v", err)
				}
				for _, p := range []string{"/etc/shadow", tc.home, tc.home + "/.ssh/id_rsa", "/"} {
					if f.Match(p).Found {
						t.Fatalf("legit entry %q matches %s", tc.entry, p)
					}
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; /etc/shadow granted = %v", f.Match("/etc/shadow").Granted)
			}
			if err.Error() != tc.want {
				t.Fatalf("err = %v\nwant  %s", err, tc.want)
			}
		})
	}
}

// TestCheck is what lev validate adds: the breadth rules against the real home, for
// entries that name it absolutely.
func TestCheck(t *testing.T) {
	es, err := ParseAll([]string{"~/docs", "regex:/data/x/.*", "../y"})
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(es, "/home/u"); err != nil {
		t.Fatalf("legit entries refused: %v", err)
	}
	bad, _ := ParseAll([]string{"~/docs", "/home/u"})
	want := `read path "/home/u" (home /home/u): it reaches the whole home directory; name a directory inside it, e.g. ~/docs`
	if err := Check(bad, "/home/u"); err == nil || err.Error() != want {
		t.Fatalf("Check = %v, want %s", err, want)
	}
}
