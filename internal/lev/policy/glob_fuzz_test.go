package policy

import (
	"regexp"
	"strings"
	"testing"
)

// globRef is an independent reading of the glob rules: * any run, ? one byte, anchored.
func globRef(p, s string) bool {
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(p[i])))
		}
	}
	b.WriteString(`\z`)
	return regexp.MustCompile(b.String()).MatchString(s)
}

func FuzzGlob(f *testing.F) {
	for _, seed := range [][2]string{
		{"*.example.com", "api.example.com"}, {"*.example.com", "example.com.evil.test"},
		{"a*b*c", "aXbYc"}, {"?*?", "ab"}, {"**", ""}, {"git *", "git push; curl x"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, p, s string) {
		// The reference works on bytes through regexp's UTF-8 view; keep to ASCII.
		for _, r := range p + s {
			if r >= 0x80 {
				return
			}
		}
		if got, want := Glob(p, s), globRef(p, s); got != want {
			t.Fatalf("Glob(%q, %q) = %v, reference says %v", p, s, got, want)
		}
	})
}
