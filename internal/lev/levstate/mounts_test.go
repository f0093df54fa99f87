package levstate

import "testing"

func TestMountinfoUnescape(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`/a/b`, "/a/b"},
		{`/a\040b`, "/a b"},
		{`/a\011b\012c\134d`, "/a\tb\nc\\d"},
		{`/a\04`, `/a\04`}, // truncated escape stays as written
		{`/a\x`, `/a\x`},
	} {
		if got := unescape(c.in); got != c.want {
			t.Errorf("unescape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
