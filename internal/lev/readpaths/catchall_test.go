package readpaths

import (
	"strings"
	"testing"
)

// TestNewFenceRefusesBoundCatchAll: Parse refuses "/" and absolute catch-all patterns, but
// a relative entry becomes one only when bound to the workdir. With
// allow_blueprint_read_paths every declaration is granted, so a blueprint declaring one of
// these would read the whole filesystem.
func TestNewFenceRefusesBoundCatchAll(t *testing.T) {
	home, wd := "/home/u", "/home/u/proj/wd"
	cases := []struct {
		name, entry, home string
		want              string // error fragment; empty means accepted
	}{
		{"relative exact reaching /", "../../../../../../..", home, `"../../../../../../..": resolves to /`},
		{"relative exact exactly reaching /", "../../../..", home, `"../../../..": resolves to /`},
		{"relative exact reaching / with a trailing slash", "../../../../../", home, "resolves to /"},
		{"relative exact reaching / via a detour", "../x/../../../../..", home, "resolves to /"},
		{"relative glob reaching /", "glob:../../../../../../**", home, `"glob:../../../../../../**": compiles to ^(?:/.*)?$`},
		{"relative glob reaching /, bare **", "glob:../../../../**", home, "matches every path"},
		{"relative glob reaching /, any top dir", "glob:../../../../*/**", home, "matches every path"},
		{"home of / makes ~ the root", "~", "/", `"~": resolves to /`},
		// Positive controls: legitimate relative entries still bind.
		{"relative exact sibling", "../shared-docs", home, ""},
		{"relative exact ancestor short of /", "../../..", home, ""},
		{"relative glob sibling", "glob:../notes/*.md", home, ""},
		{"relative glob ancestor short of /", "glob:../../../**", home, ""},
		{"home glob", "glob:~/design-docs/**", home, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Parse(tc.entry)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			f, err := NewFence("a", []Status{{Entry: e, Granted: true}}, tc.home, wd)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("legit entry refused: %v", err)
				}
				if m := f.Match("/etc/shadow"); m.Found {
					t.Fatalf("legit entry %q matches /etc/shadow", tc.entry)
				}
				return
			}
			if err == nil {
				t.Fatalf("catch-all accepted; /etc/shadow granted = %v", f.Match("/etc/shadow").Granted)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.entry) {
				t.Fatalf("err = %v, want it to name %q and contain %q", err, tc.entry, tc.want)
			}
		})
	}
}
