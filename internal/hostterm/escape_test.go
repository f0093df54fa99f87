package hostterm

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// hasControl reports the first byte a terminal could obey: C0 other than the allowed
// layout, DEL, a UTF-8 C1 control, or a byte that is not UTF-8.
func hasControl(s, allowed string) (string, bool) {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return s[i:], true
		case (r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f)) && !strings.ContainsRune(allowed, r):
			return s[i:], true
		}
	}
	return "", false
}

// TestEscapeStream: each attack written through the stream writer (as lever's output to a
// terminal is) comes out visible, split anywhere across writes; ordinary text, UTF-8
// included, is the control and passes unchanged.
func TestEscapeStream(t *testing.T) {
	cases := []struct {
		name   string
		writes []string
		want   string
	}{
		{"plain text and UTF-8 pass unchanged", []string{"ok: é ü 日本 \u00a0nbsp\n\tend"}, "ok: é ü 日本 \u00a0nbsp\n\tend"},
		{"OSC 52 clipboard write", []string{"\x1b]52;c;cm0gLXJmIH4=\x07"}, `\x1b]52;c;cm0gLXJmIH4=\x07`},
		{"retitle", []string{"\x1b]0;pwned\x07"}, `\x1b]0;pwned\x07`},
		{"carriage return hides a line", []string{"rm -rf ~\rls"}, `rm -rf ~\x0dls`},
		{"CR LF is not a line end outside a session", []string{"a\r\nb"}, "a\\x0d\nb"},
		{"CSI cursor up, erase line", []string{"\x1b[1A\x1b[2K"}, `\x1b[1A\x1b[2K`},
		{"DEL", []string{"a\x7fb"}, `a\x7fb`},
		{"backspace", []string{"rm\b\bls"}, `rm\x08\x08ls`},
		{"8-bit CSI as UTF-8", []string{"\u009b2J"}, `\u009b2J`},
		{"8-bit OSC and ST as UTF-8", []string{"\u009d0;t\u009c"}, `\u009d0;t\u009c`},
		{"8-bit CSI split across writes", []string{"x\xc2", "\x9b2J"}, `x\u009b2J`},
		{"a raw 0x9b byte (CSI in Latin-1)", []string{"x\x9b2J"}, `x\x9b2J`},
		{"0xC2 then a printable split across writes", []string{"\xc2", "\xa0"}, "\u00a0"},
		{"a three-byte rune split three ways", []string{"\xe6", "\x97", "\xa5!"}, "日!"},
		{"0xC2 at the very end is shown", []string{"a\xc2"}, `a\xc2`},
		{"a truncated rune at the end is shown", []string{"a\xe6\x97"}, `a\xe6\x97`},
		{"U+FFFD itself is text", []string{"\uFFFD"}, "\uFFFD"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := NewWriter(&out)
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write: %d %v", n, err)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got %q, want %q", out.String(), tc.want)
			}
			if rest, bad := hasControl(out.String(), "\n\t"); bad {
				t.Errorf("a control reaches the terminal at %q", rest)
			}
			// The one-shot form is the same rule.
			if got := Escape(strings.Join(tc.writes, "")); got != tc.want {
				t.Errorf("Escape: got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSessionWriter: a terminal session's output keeps its CR LF line ends (the control)
// while a bare CR, which would redraw the line, is shown, also when the stream splits
// between the CR and what follows it.
func TestSessionWriter(t *testing.T) {
	cases := []struct {
		name   string
		writes []string
		want   string
	}{
		{"CR LF line ends pass", []string{"lev: one\r\nlev: two\r\n"}, "lev: one\r\nlev: two\r\n"},
		{"CR LF split between writes", []string{"one\r", "\ntwo"}, "one\r\ntwo"},
		{"a bare CR redraws: shown", []string{"wants shell rm -rf ~\rwants shell ls"}, `wants shell rm -rf ~\x0dwants shell ls`},
		{"a bare CR split from the text after it", []string{"rm -rf ~\r", "ls"}, `rm -rf ~\x0dls`},
		{"CR CR LF: the first is bare", []string{"a\r\r\n"}, "a\\x0d\r\n"},
		{"a CR at the stream's end", []string{"a\r"}, `a\x0d`},
		{"erase line then CR", []string{"\x1b[2K\r\n"}, "\\x1b[2K\r\n"},
		{"OSC 52 in a session", []string{"\x1b]52;c;eA==\x07\r\n"}, "\\x1b]52;c;eA==\\x07\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			w := NewSessionWriter(&out)
			for _, s := range tc.writes {
				w.Write([]byte(s))
			}
			w.Flush()
			if out.String() != tc.want {
				t.Errorf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}

// TestEscapeLine: one-line text shows newline and tab too, so a message cannot start a
// line of its own that looks like the program's; printable text is unchanged.
func TestEscapeLine(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"command":"rm -rf  ~/x; echo \"a\tb\""}`, `{"command":"rm -rf  ~/x; echo \"a\tb\""}`},
		{"ok\nlev: #9 tool shell: ok", `ok\x0alev: #9 tool shell: ok`},
		{"a\tb", `a\x09b`},
		{"\x1b[2K\r\u009b\x7f", `\x1b[2K\x0d\u009b\x7f`},
		// What reorders or hides text: a right-to-left override that shows
		// "rm -rf ~; echo hs.exe" for the bytes that run, an isolate, zero-width
		// characters; the printable text around them, and other UTF-8, unchanged.
		{"echo \u202ehs.exe \u2066x\u2069 a\u200bb\ufeff é 日本", `echo \u202ehs.exe \u2066x\u2069 a\u200bb\ufeff é 日本`},
	}
	for _, tc := range cases {
		if got := EscapeLine(tc.in); got != tc.want {
			t.Errorf("EscapeLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestEscapeJSON: JSON whose strings hold DEL or C1 controls raw (encoding/json leaves
// them) prints none of them, and decodes to the very same value; JSON without them is
// unchanged (the control).
func TestEscapeJSON(t *testing.T) {
	cases := []struct {
		name string
		v    any
		same bool // the encoding needs no change
	}{
		{"plain", map[string]string{"agent": "docsbot", "note": "é 日本 \u00a0"}, true},
		{"8-bit CSI in a name", map[string]string{"agent": "x\u009b2Jy"}, false},
		{"DEL and NEL", map[string]string{"error": "a\x7fb\u0085c"}, false},
		{"C0 is encoding/json's own", map[string]string{"error": "\x1b]52;c;eA==\x07"}, true},
		{"a right-to-left override", map[string]string{"agent": "doc\u202esbot"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			got := EscapeJSON(b)
			if rest, bad := hasControl(string(got), ""); bad {
				t.Errorf("a control reaches the terminal at %q", rest)
			}
			if tc.same != bytes.Equal(got, b) {
				t.Errorf("changed=%v: %s -> %s", !bytes.Equal(got, b), b, got)
			}
			var back, orig any
			json.Unmarshal(b, &orig)
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatalf("not JSON any more: %v: %s", err, got)
			}
			if ob, _ := json.Marshal(orig); !bytes.Equal(ob, mustMarshal(t, back)) {
				t.Errorf("decodes to another value: %s", got)
			}
		})
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
