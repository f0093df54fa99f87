package readpaths

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
)

// readGrant parses GrantLine's two halves as config.toml would hold them (the header on
// its own line) with the TOML library lev's config loader uses, and returns what the line
// grants: [security] read_paths for no agent, else [agent_read_paths.AGENT] allow.
func readGrant(t *testing.T, agent, header, assign string) []string {
	t.Helper()
	doc := header + "\n" + assign + "\n"
	var m map[string]any
	if err := toml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("not valid TOML: %v\n%s", err, doc)
	}
	var list any
	if agent == "" {
		sec, _ := m["security"].(map[string]any)
		list = sec["read_paths"]
	} else {
		tables, _ := m["agent_read_paths"].(map[string]any)
		tbl, _ := tables[agent].(map[string]any)
		list = tbl["allow"]
	}
	items, ok := list.([]any)
	if !ok {
		t.Fatalf("no grant list for agent %q in %v\n%s", agent, m, doc)
	}
	out := make([]string, len(items))
	for i, it := range items {
		out[i], _ = it.(string)
	}
	return out
}

// checkGrantLine: GrantLine is its two halves on one line, they parse as TOML and read
// back as exactly the agent's table and the entries, and the line shows every character
// a terminal would not (nothing but printable runes and U+0020 in it).
func checkGrantLine(t *testing.T, agent string, raws []string) string {
	t.Helper()
	header, assign, err := grantTOML(agent, raws)
	if err != nil {
		t.Fatalf("grantTOML(%q, %q): %v", agent, raws, err)
	}
	line := GrantLine(agent, raws)
	if line != header+" "+assign {
		t.Fatalf("GrantLine = %q, want %q", line, header+" "+assign)
	}
	if got := readGrant(t, agent, header, assign); !slices.Equal(got, raws) {
		t.Fatalf("%s\nreads back as %q, want %q", line, got, raws)
	}
	for _, r := range line {
		if r != ' ' && !unicode.IsPrint(r) {
			t.Fatalf("%q shows %U unescaped", line, r)
		}
	}
	return line
}

// TestGrantLineIsTOML: the line lev tells the user to add to config.toml parses with
// go-toml (the library config.toml is read with) and grants exactly the entries it names,
// whatever characters they hold; Go's %q, which GrantLine used, writes \x1b, \a, \v and
// \xff, which TOML refuses. Entries Parse accepts hold only graphic characters; the
// control and format characters here come from callers handing raw text.
func TestGrantLineIsTOML(t *testing.T) {
	for _, tc := range []struct {
		name  string
		agent string
		raws  []string
		want  string // the exact line, where it matters
	}{
		{"plain", "cto", []string{"~/docs", "glob:~/design/**"}, `[agent_read_paths.cto] allow = ["~/docs", "glob:~/design/**"]`},
		{"no install name", "", []string{"~/docs"}, `[security] read_paths = ["~/docs"]`},
		{"an agent name with a dot", "my.agent", []string{"~/docs"}, `[agent_read_paths."my.agent"] allow = ["~/docs"]`},
		{"quotes and backslashes", "cto", []string{`regex:~/data/\d+`, `~/a "b" \c\`, `\\server\share`}, `[agent_read_paths.cto] allow = ["regex:~/data/\\d+", "~/a \"b\" \\c\\", "\\\\server\\share"]`},
		{"TOML's own escapes", "cto", []string{"~/a\bb\tc\nd\fe\rf"}, `[agent_read_paths.cto] allow = ["~/a\bb\tc\nd\fe\rf"]`},
		{"escapes %q writes that TOML has not", "cto", []string{"~/\x1b[31mred", "~/bell\a", "~/vt\v", "~/nul\x00"}, `[agent_read_paths.cto] allow = ["~/\u001b[31mred", "~/bell\u0007", "~/vt\u000b", "~/nul\u0000"]`},
		{"DEL and C1", "cto", []string{"~/del\x7f", "~/csi\u009b2J", "~/nel\u0085"}, `[agent_read_paths.cto] allow = ["~/del\u007f", "~/csi\u009b2J", "~/nel\u0085"]`},
		{"bidi and zero-width", "cto", []string{"~/\u202egnp.exe", "~/\u2066x\u2069", "~/zero\u200bwidth\u200d", "~/\ufeffbom", "~/\u061calm"}, `[agent_read_paths.cto] allow = ["~/\u202egnp.exe", "~/\u2066x\u2069", "~/zero\u200bwidth\u200d", "~/\ufeffbom", "~/\u061calm"]`},
		{"separators and other spaces", "cto", []string{"~/line\u2028sep", "~/nb\u00a0sp", "~/ideo\u3000sp", "~/plain space"}, `[agent_read_paths.cto] allow = ["~/line\u2028sep", "~/nb\u00a0sp", "~/ideo\u3000sp", "~/plain space"]`},
		{"beyond the BMP", "cto", []string{"~/tag\U000e0001", "~/private\U000f0000", "~/😀"}, `[agent_read_paths.cto] allow = ["~/tag\U000e0001", "~/private\U000f0000", "~/😀"]`},
		{"printable non-ASCII kept", "cto", []string{"~/café/日本/\ufffd"}, `[agent_read_paths.cto] allow = ["~/café/日本/` + "\ufffd" + `"]`},
		{"an agent name with controls and quotes", "a\x1b\"b\u202e", []string{"~/docs"}, `[agent_read_paths."a\u001b\"b\u202e"] allow = ["~/docs"]`},
		{"no entries", "cto", []string{}, `[agent_read_paths.cto] allow = []`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if line := checkGrantLine(t, tc.agent, tc.raws); tc.want != "" && line != tc.want {
				t.Fatalf("GrantLine = %s\nwant        %s", line, tc.want)
			}
		})
	}
}

// TestGrantLineEveryCharacter: every Unicode scalar value, 2048 to an entry, reads back
// through the line as itself.
func TestGrantLineEveryCharacter(t *testing.T) {
	var b strings.Builder
	n := 0
	flush := func() {
		checkGrantLine(t, "cto", []string{b.String()})
		b.Reset()
		n = 0
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue // surrogates: no UTF-8 encoding
		}
		b.WriteRune(r)
		if n++; n == 2048 {
			flush()
		}
	}
	flush()
}

// TestGrantLineInvalidUTF8: TOML text is UTF-8, so no line holds bytes that are not; lev
// says so rather than suggest a line that does not parse (%q's "\xff") or one that grants
// another path (a U+FFFD in its place).
func TestGrantLineInvalidUTF8(t *testing.T) {
	for _, tc := range []struct {
		agent string
		raws  []string
		want  string
	}{
		{"cto", []string{"~/docs", "~/\xff"}, `(no config.toml line can grant it: read path "~/\xff" is not valid UTF-8, which a TOML file cannot hold)`},
		{"", []string{"~/a\xc3"}, `(no config.toml line can grant it: read path "~/a\xc3" is not valid UTF-8, which a TOML file cannot hold)`},
		{"a\xedb", []string{"~/docs"}, `(no config.toml line can grant it: agent name "a\xedb" is not valid UTF-8, which a TOML file cannot hold)`},
	} {
		if got := GrantLine(tc.agent, tc.raws); got != tc.want {
			t.Errorf("GrantLine(%q, %q) = %s\nwant %s", tc.agent, tc.raws, got, tc.want)
		}
	}
}
