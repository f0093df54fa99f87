package pipeline

import (
	"sort"
	"testing"

	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// TestToolNamesMatchRegistry: the names a [tool_permissions] table may set are exactly the
// registered built-ins plus the tools with a default permission (web_search: named by the
// spec, not offered yet). A tool added to one and not the other fails here.
func TestToolNamesMatchRegistry(t *testing.T) {
	want := map[string]bool{}
	for _, n := range Names() {
		want[n] = true
	}
	for n := range Defaults {
		want[n] = true
	}
	var w []string
	for n := range want {
		w = append(w, n)
	}
	sort.Strings(w)
	got := append([]string(nil), toolnames.Builtin...)
	sort.Strings(got)
	if len(got) != len(w) {
		t.Fatalf("toolnames.Builtin = %v, want %v", got, w)
	}
	for i := range w {
		if got[i] != w[i] {
			t.Fatalf("toolnames.Builtin = %v, want %v", got, w)
		}
	}
}
