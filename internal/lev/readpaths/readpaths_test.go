package readpaths

import (
	"fmt"
	"strings"
	"testing"
)

func quoteGo(s string) string { return fmt.Sprintf("%q", s) }

func TestMatch(t *testing.T) {
	home, wd := "/home/u", "/home/u/proj/wd"
	cases := []struct {
		entry string
		path  string
		want  bool
	}{
		{"~/.leviath/runs", "/home/u/.leviath/runs", true},
		{"~/.leviath/runs", "/home/u/.leviath/runs/r1/run.json", true},
		{"~/.leviath/runs", "/home/u/.leviath/runs-old/x", false},
		{"~/.leviath/runs", "/home/u/.leviath", false},
		{"../shared-docs", "/home/u/proj/shared-docs/a.md", true},
		{"../shared-docs", "/home/u/proj/wd/shared-docs/a.md", false},
		{"glob:~/design-docs/**", "/home/u/design-docs", true},
		{"glob:~/design-docs/**", "/home/u/design-docs/a/b/c.md", true},
		{"glob:~/design-docs/**", "/home/u/design-docs-x/a", false},
		{"glob:~/d/*.md", "/home/u/d/a.md", true},
		{"glob:~/d/*.md", "/home/u/d/sub/a.md", false},
		{"glob:~/d/**/*.md", "/home/u/d/a.md", true},
		{"glob:~/d/**/*.md", "/home/u/d/x/y/a.md", true},
		{"glob:~/d/?.md", "/home/u/d/ab.md", false},
		{"glob:../notes/*.txt", "/home/u/proj/notes/n.txt", true},
		{"glob:./cache/*", "/home/u/proj/wd/cache/x", true},
		{"regex:/data/archives/.*", "/data/archives/2024/x.tar", true},
		{"regex:/data/archives/.*", "/data/archives-x/y", false},
		{"regex:/data/runs", "/data/runs", true},
		{"regex:/data/runs", "/data/runs-anything", false},
		{"regex:/data/runs", "/data/runs/x", false},
		{"regex:~/logs/[0-9]+\\.log", "/home/u/logs/12.log", true},
		{"regex:/data/x/(a|b)", "/data/x/b", true},
		{"regex:/data/x/(a|b)", "/data/x/c", false},
		// Glob classes, * and ? never match "/".
		{"glob:~/pub/a[!x]*", "/home/u/pub/ab.txt", true},
		{"glob:~/pub/a[!x]*", "/home/u/pub/a/secret", false},
		{"glob:~/pub/a[!x]*", "/home/u/pub/ax", false},
		{"glob:~/pub/a[^x]*", "/home/u/pub/a/secret", false},
		{"glob:~/pub/a[^x]*", "/home/u/pub/ay", true},
		{"glob:~/pub/a[a-z]", "/home/u/pub/aq", true},
		{"glob:~/pub/a?b", "/home/u/pub/a/b", false},
		{"glob:~/pub/a?b", "/home/u/pub/a\nb", true},
		{"glob:~/pub/a*b", "/home/u/pub/a/b", false},
		{"glob:~/pub/a*b", "/home/u/pub/a\nb", true},
		{"glob:~/pub/**", "/home/u/pub/x\ny/z", true},
		{"glob:~/pub/a**", "/home/u/pub/a/b/c", true},
		{"glob:~/pub/a**", "/home/u/pubx", false},
		// Canonical spellings match what the canonical form matches.
		{"~/docs/", "/home/u/docs/a", true},
		{"~//docs", "/home/u/docs/a", true},
		{"glob:~//pub///*.md/", "/home/u/pub/a.md", true},
		{"./cache", "/home/u/proj/wd/cache/x", true},
		// Regex metacharacters in the home are literal.
		{"regex:~/x", "/home/u/x", true},
		// Regexes match whole paths, inner anchors or not.
		{"regex:/data/x/a(?m:$)", "/data/x/a", true},
		{"regex:/data/x/a(?m:$)", "/data/x/a\\n", false},
		{"regex:/data/x/a$", "/data/x/a", true},
		{"regex:/data/x/a", "/data/x/a/../../../etc", false},
		// Not a real path: never matched.
		{"~/.leviath/runs", "/home/u/.leviath/runs/../../.ssh/id_rsa", false},
		{"~/.leviath/runs", "home/u/.leviath/runs/x", false},
	}
	for _, tc := range cases {
		tc.path = strings.ReplaceAll(tc.path, `\n`, "\n")
		t.Run(tc.entry+" "+tc.path, func(t *testing.T) {
			e, err := Parse(tc.entry)
			if err != nil {
				t.Fatal(err)
			}
			f, err := NewFence("a", []Status{{Entry: e, Granted: true}}, home, wd)
			if err != nil {
				t.Fatal(err)
			}
			if m := f.Match(tc.path); m.Granted != tc.want {
				t.Fatalf("Match = %v, want %v", m.Granted, tc.want)
			}
		})
	}
}

// TestGrantComparesPatterns: a grant applies when the canonical forms agree: slashes,
// a trailing slash and a relative "./" do not matter; kind, case and the home's spelling do.
func TestGrantComparesPatterns(t *testing.T) {
	cases := []struct {
		declared, grant string
		want            bool
	}{
		{"~/runs/", "~/runs", true},
		{"~//runs", "~/runs", true},
		{"~/runs", "~/runs/", true},
		{"/data//x", "/data/x/", true},
		{"./x", "x", true},
		{"./../x", "../x", true},
		{"glob:~/d//**", "glob:~/d/**/", true},
		{"  ~/runs  ", "~/runs", true},
		{"glob:~/d/**", "glob:~/d/*", false},
		{"~/d", "glob:~/d", false},
		{"regex:/data/x/.*", "regex:/data/x/(.*)", false},
		{"~/Docs", "~/docs", false},
		{"~/docs", "/home/u/docs", false},      // the home's spelling is part of the pattern
		{"~/caf\u00e9", "~/cafe\u0301", false}, // no Unicode normalisation: bytes compare
	}
	for _, tc := range cases {
		t.Run(tc.declared+" vs "+tc.grant, func(t *testing.T) {
			decl, err := Parse(tc.declared)
			if err != nil {
				t.Fatal(err)
			}
			g, err := Parse(tc.grant)
			if err != nil {
				t.Fatal(err)
			}
			st := Resolve("cto", []Entry{decl}, Grants{Agent: map[string][]Entry{"cto": {g}}})
			if st[0].Granted != tc.want {
				t.Fatalf("granted = %v, want %v (keys %q, %q)", st[0].Granted, tc.want, decl.Key(), g.Key())
			}
			if other := Resolve("other", []Entry{decl}, Grants{Agent: map[string][]Entry{"cto": {g}}}); other[0].Granted {
				t.Fatal("an agent's grant applied to another agent")
			}
			if !tc.want {
				return
			}
			// Granted means the same rule: the grant's own spelling, bound, matches
			// exactly what the declaration matches.
			fd, _ := NewFence("cto", []Status{{Entry: decl, Granted: true}}, "/home/u", "/home/u/p/wd")
			fg, _ := NewFence("cto", []Status{{Entry: g, Granted: true}}, "/home/u", "/home/u/p/wd")
			for _, p := range []string{"/home/u/runs", "/home/u/runs/a", "/data/x/y", "/home/u/p/wd/x", "/home/u/p/x", "/home/u/d/e/f", "/home/u/runsx"} {
				if fd.Match(p).Granted != fg.Match(p).Granted {
					t.Fatalf("%s: declared matches %v, grant matches %v", p, fd.Match(p).Granted, fg.Match(p).Granted)
				}
			}
		})
	}
}

// BenchmarkFenceMatch is the fence's own lookup (no filesystem), with the granted entry
// last among n of mixed kinds.
func BenchmarkFenceMatch(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("read_paths=%d", n), func(b *testing.B) {
			var sts []Status
			for i := n - 1; i >= 0; i-- {
				raw := []string{"/data/d%d", "glob:/data/g%d/**/*.txt", "regex:/data/r%d/.*"}[i%3]
				e, err := Parse(fmt.Sprintf(raw, i))
				if err != nil {
					b.Fatal(err)
				}
				sts = append(sts, Status{Entry: e, Granted: true})
			}
			f, _ := NewFence("a", sts, "/home/u", "/home/u/wd")
			p := "/data/d0/sub/file.txt"
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !f.Match(p).Granted {
					b.Fatal("not granted")
				}
			}
		})
	}
}
