package forwardrec

import (
	"path/filepath"
	"reflect"
	"testing"
)

func TestAddList(t *testing.T) {
	f := File(filepath.Join(t.TempDir(), "state", "forwards"))
	if got := f.List(); got != nil {
		t.Fatalf("no record: %v", got)
	}
	for _, p := range [][2]string{{"/s/a.sock", "/run/a"}, {"/s/b.sock", "/run/b"}, {"/s/a.sock", "/run/a"}} {
		if err := f.Add(p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	want := [][2]string{{"/s/a.sock", "/run/a"}, {"/s/b.sock", "/run/b"}}
	if got := f.List(); !reflect.DeepEqual(got, want) {
		t.Fatalf("List = %v, want %v (a forward recorded twice is one line)", got, want)
	}
}
