package hostterm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// mustShow is the class named by hand, independent of the properties visible.go uses:
// every range here must come out escaped, alone and after a visible character.
var mustShow = []struct {
	name   string
	lo, hi rune
}{
	{"C0", 0x00, 0x1f}, {"DEL", 0x7f, 0x7f}, {"C1", 0x80, 0x9f},
	{"soft hyphen", 0xad, 0xad}, {"combining grapheme joiner", 0x34f, 0x34f},
	{"Arabic letter mark", 0x61c, 0x61c}, {"Hangul fillers", 0x115f, 0x1160},
	{"Khmer inherent vowels", 0x17b4, 0x17b5}, {"Mongolian vowel separator", 0x180e, 0x180e},
	{"zero-width space, joiners, LRM, RLM", 0x200b, 0x200f},
	{"line and paragraph separators", 0x2028, 0x2029},
	{"bidi embeddings and overrides", 0x202a, 0x202e},
	{"word joiner, invisible operators", 0x2060, 0x2064}, {"U+2065", 0x2065, 0x2065},
	{"bidi isolates", 0x2066, 0x2069}, {"deprecated format characters", 0x206a, 0x206f},
	{"Hangul filler", 0x3164, 0x3164}, {"BOM, zero-width no-break space", 0xfeff, 0xfeff},
	{"halfwidth Hangul filler", 0xffa0, 0xffa0}, {"interlinear annotation", 0xfff9, 0xfffb},
	{"noncharacters", 0xfffe, 0xffff}, {"noncharacters U+FDD0", 0xfdd0, 0xfdef},
	{"shorthand format controls", 0x1bca0, 0x1bca3}, {"musical format", 0x1d173, 0x1d17a},
	{"tag characters", 0xe0000, 0xe007f}, {"supplementary variation selectors", 0xe0100, 0xe01ef},
	{"the rest of plane 14", 0xe0080, 0xe00ff}, {"plane 14 after the selectors", 0xe01f0, 0xe0fff},
	{"unassigned plane 3 to 13", 0x3134b, 0x3134b},
	{"plane 16 noncharacters", 0x10fffe, 0x10ffff},
}

// mustPass is the positive control: text a terminal draws as itself passes unchanged.
var mustPass = []struct {
	name   string
	lo, hi rune
}{
	{"printable ASCII", 0x21, 0x7e}, {"Latin-1", 0xa1, 0xac}, {"Latin-1 letters", 0xc0, 0xff},
	{"Greek", 0x3b1, 0x3c9}, {"Cyrillic", 0x410, 0x44f}, {"Arabic letters", 0x627, 0x64a},
	{"Hebrew", 0x5d0, 0x5ea}, {"CJK", 0x4e00, 0x4fff}, {"Hiragana", 0x3041, 0x3096},
	{"spaces a terminal draws as space", 0x2000, 0x200a}, {"no-break space", 0xa0, 0xa0},
	{"emoji", 0x1f600, 0x1f64f}, {"private use (a glyph or a box)", 0xe000, 0xe0ff},
	{"combining acute accent", 0x301, 0x301},
}

// TestEveryCodePoint walks all of Unicode: each code point alone, after a visible
// character and after a space comes out either as itself or fully escaped, never
// anything else; the hand-named class is escaped, the control ranges pass; what passes
// is graphic or private use, or a single variation selector on a visible character.
func TestEveryCodePoint(t *testing.T) {
	inShow := func(r rune) string {
		for _, c := range mustShow {
			if r >= c.lo && r <= c.hi {
				return c.name
			}
		}
		return ""
	}
	passed, escaped := 0, 0
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue // not encodable in UTF-8; a surrogate's bytes are invalid UTF-8 (tested below)
		}
		s := string(r)
		for _, ctx := range []string{"", "a", " "} {
			got := EscapeLine(ctx + s)
			got, ok := strings.CutPrefix(got, ctx)
			if !ok {
				t.Fatalf("U+%04X after %q: prefix changed: %q", r, ctx, got)
			}
			want := fmt.Sprintf(`\u%04x`, r)
			switch {
			case r < 0x20 || r == 0x7f:
				want = fmt.Sprintf(`\x%02x`, r)
			case r > 0xffff:
				want = fmt.Sprintf(`\U%08x`, r)
			}
			pass := got == s
			if !pass && got != want {
				t.Fatalf("U+%04X after %q: got %q, want itself or %q", r, ctx, got, want)
			}
			vsOnBase := ctx == "a" && r < 0x10000 && unicode.Is(unicode.Variation_Selector, r)
			if name := inShow(r); name != "" && pass && !vsOnBase {
				t.Errorf("U+%04X (%s) after %q passes unescaped", r, name, ctx)
			}
			if pass && !vsOnBase && !unicode.IsGraphic(r) && !unicode.Is(unicode.Co, r) {
				t.Errorf("U+%04X after %q passes but is not graphic", r, ctx)
			}
			if pass && unicode.Is(unicode.Variation_Selector, r) && !vsOnBase {
				t.Errorf("variation selector U+%04X after %q passes", r, ctx)
			}
			if ctx == "" {
				if pass {
					passed++
				} else {
					escaped++
				}
			}
		}
	}
	for _, c := range mustPass {
		for r := c.lo; r <= c.hi; r++ {
			if unicode.Is(unicode.Cn, r) || (!unicode.IsGraphic(r) && !unicode.Is(unicode.Co, r)) {
				continue // a gap in a script's block
			}
			if got := Escape(string(r)); got != string(r) {
				t.Errorf("%s: U+%04X became %q", c.name, r, got)
			}
		}
	}
	// A surrogate's UTF-8 spelling is not UTF-8: shown byte by byte.
	if got := EscapeLine("\xed\xa0\x80"); got != `\xed\xa0\x80` {
		t.Errorf("encoded surrogate: %q", got)
	}
	t.Logf("%d code points pass, %d are shown escaped", passed, escaped)
}

// TestInvisibleAttacks: the attacks of the class through the stream writer (split
// anywhere, as lever's output to a terminal is) and EscapeLine; an emoji with its one
// presentation selector is the control that passes unchanged.
func TestInvisibleAttacks(t *testing.T) {
	tags := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			b.WriteRune(0xe0000 + r)
		}
		return b.String()
	}
	cases := []struct{ name, in, want string }{
		{"tag characters spell a hidden instruction", "ok" + tags("rm -rf ~"), `ok\U000e0072\U000e006d\U000e0020\U000e002d\U000e0072\U000e0066\U000e0020\U000e007e`},
		{"a word split by zero-width space", "r\u200bm -rf", `r\u200bm -rf`},
		{"right-to-left override", "echo \u202ehs.exe", `echo \u202ehs.exe`},
		{"line separator", "a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"soft hyphen", "pass\u00adword", `pass\u00adword`},
		{"Hangul filler as a blank name", "\u3164", `\u3164`},
		{"bytes smuggled in supplementary selectors", "x\U000e0100\U000e0101", `x\U000e0100\U000e0101`},
		{"two selectors on one character", "x\ufe0f\ufe0e", "x\ufe0f" + `\ufe0e`},
		{"a selector on nothing", "\ufe0f", `\ufe0f`},
		{"a selector after a space", " \ufe0f", ` \ufe0f`},
		{"a selector after an escaped character", "\u200b\ufe0f", `\u200b\ufe0f`},
		{"control: an emoji with its colour selector", "❤\ufe0f ok ✔\ufe0f", "❤\ufe0f ok ✔\ufe0f"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := EscapeLine(tc.in); got != tc.want {
				t.Errorf("EscapeLine = %q, want %q", got, tc.want)
			}
			// Byte by byte through the stream writer: the same, whatever the split.
			var out strings.Builder
			w := NewWriter(&out)
			for i := 0; i < len(tc.in); i++ {
				w.Write([]byte{tc.in[i]})
			}
			w.Flush()
			if out.String() != tc.want {
				t.Errorf("Writer = %q, want %q", out.String(), tc.want)
			}
			// JSON: the same value back, with nothing of the class left raw.
			b, _ := json.Marshal(map[string]string{"s": tc.in})
			j := EscapeJSON(b)
			var back map[string]string
			if err := json.Unmarshal(j, &back); err != nil || back["s"] != tc.in {
				t.Errorf("EscapeJSON %s decodes to %q (%v)", j, back["s"], err)
			}
			if tc.in != tc.want {
				for _, r := range string(j) {
					if r >= utf8.RuneSelf && !shown(r, true) {
						t.Errorf("EscapeJSON left U+%04X raw: %s", r, j)
					}
				}
			}
		})
	}
}
