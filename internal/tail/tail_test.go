package tail

import "testing"

func TestLines(t *testing.T) {
	tests := []struct {
		name, s string
		n       int
		sep     string
		want    string
	}{
		{"fewer lines than n: all of them", "a\nb", 5, "\n", "a\nb"},
		{"exactly n", "a\nb\nc", 3, " | ", "a | b | c"},
		{"more than n: only the last n", "a\nb\nc\nd", 2, "\n", "c\nd"},
		{"folded onto one line", "x\ny\nz", 2, " | ", "y | z"},
		{"trailing newline and blank space trimmed first", "\n a\nb\n\n", 1, "\n", "b"},
		{"empty output", "", 3, " | ", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Lines(tt.s, tt.n, tt.sep); got != tt.want {
				t.Errorf("Lines(%q, %d, %q) = %q, want %q", tt.s, tt.n, tt.sep, got, tt.want)
			}
		})
	}
}
