package readpaths

import (
	"fmt"
	"testing"
)

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
		{"regex:/a/x|/b/y", "/b/y", true},
	}
	for _, tc := range cases {
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

func TestGrantComparesPatterns(t *testing.T) {
	decl, _ := ParseAll([]string{"~/runs/", "glob:~/d/**", "/data/x"})
	g := Grants{Agent: map[string][]Entry{}}
	g.Agent["cto"], _ = ParseAll([]string{"~/runs"})
	g.Security, _ = ParseAll([]string{"/data//x", "glob:~/d/*"})
	sts := Resolve("cto", decl, g)
	want := []bool{true, false, true}
	for i, s := range sts {
		if s.Granted != want[i] {
			t.Errorf("%s granted = %v, want %v (%s)", s.Entry.Raw, s.Granted, want[i], s.By)
		}
	}
	if other := Resolve("other", decl, g); other[0].Granted {
		t.Error("an agent's grant applied to another agent")
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
