package fspath

import "testing"

func TestWithin(t *testing.T) {
	tests := []struct {
		dir, p string
		want   bool
	}{
		{"/srv/tree", "/srv/tree", true},
		{"/srv/tree", "/srv/tree/a/b", true},
		{"/srv/tree/", "/srv/tree/a", true},
		{"/srv/tree", "/srv/tree2", false}, // shares a prefix, is a sibling
		{"/srv/tree", "/srv/tree2/x", false},
		{"/srv/tree", "/srv", false},             // the parent is not inside
		{"/srv/tree", "/srv/tree/../etc", false}, // lexically /srv/etc
		{"/srv/tree", "/srv/tree/a/../b", true},
		{"/", "/etc/passwd", true},
		{"/", "/", true},
		{"/srv/tree", "srv/tree/a", false}, // relative never inside absolute
		{"tree", "/tree/a", false},
		{".", "a/b", true},
		{".", "..", false},
		{".", "../a", false},
		{".", "..a", true}, // a name that starts with two dots
		{"a", "a/b", true},
		{"a", "ab", false},
		{"../a", "../a/b", true},
	}
	for _, tt := range tests {
		if got := Within(tt.dir, tt.p); got != tt.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tt.dir, tt.p, got, tt.want)
		}
	}
}
