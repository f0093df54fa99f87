package hosttrust

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigPin(t *testing.T) {
	state := t.TempDir()
	real := "/home/u/proj/lever.yaml"
	v1, v2 := []byte("name: a\n"), []byte("name: a\negress: open\n")
	// No copy yet (never brought up): anything passes.
	if err := CheckConfig(state, real, v1); err != nil {
		t.Fatalf("no copy: %v", err)
	}
	if err := AcceptConfig(state, real, v1); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(ConfigPin(state, real))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the copy: %v %v", st, err)
	}
	if dst, _ := os.Stat(filepath.Dir(ConfigPin(state, real))); dst.Mode().Perm() != 0o700 {
		t.Errorf("the copies' directory has mode %v", dst.Mode().Perm())
	}
	cases := []struct {
		name string
		real string
		data []byte
		ok   bool
	}{
		{"the same bytes", real, v1, true},
		{"changed", real, v2, false},
		{"a byte more", real, append(append([]byte{}, v1...), ' '), false},
		{"another file has no copy", "/home/u/other/lever.yaml", v2, true},
	}
	for _, tc := range cases {
		err := CheckConfig(state, tc.real, tc.data)
		if tc.ok != (err == nil) {
			t.Errorf("%s: err %v", tc.name, err)
		}
		if err != nil && (!errors.Is(err, ErrConfigChanged) || !strings.Contains(err.Error(), "lever up -c "+tc.real+" --accept-config") || !strings.Contains(err.Error(), "diff "+ConfigPin(state, real))) {
			t.Errorf("%s: the refusal does not say what to do: %v", tc.name, err)
		}
	}
	// Accepting the change makes it the copy.
	if err := AcceptConfig(state, real, v2); err != nil {
		t.Fatal(err)
	}
	if err := CheckConfig(state, real, v2); err != nil {
		t.Errorf("after accepting: %v", err)
	}
	if err := CheckConfig(state, real, v1); err == nil {
		t.Errorf("the old bytes pass after the new were accepted")
	}
}

// TestKeptGrants: no block before the first confirmation; Keep makes the block Kept
// returns, in a 0600 file of a 0700 directory, replaced whole by the next Keep; a block
// kept for one lever.yaml is not another's.
func TestKeptGrants(t *testing.T) {
	root := t.TempDir()
	a, b := "/p/a/lever.yaml", "/p/b/lever.yaml"
	if k, err := Kept(root, a); err != nil || k != nil {
		t.Fatalf("before any confirmation: %q, %v", k, err)
	}
	for _, block := range []string{"  egress: open\n", "  egress: closed\n"} {
		if err := Keep(root, a, []byte(block)); err != nil {
			t.Fatal(err)
		}
		if k, err := Kept(root, a); err != nil || string(k) != block {
			t.Fatalf("Kept = %q, %v; want %q", k, err, block)
		}
	}
	if k, _ := Kept(root, b); k != nil {
		t.Fatalf("another lever.yaml's block: %q", k)
	}
	st, err := os.Stat(GrantsPin(root, a))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kept block: %v %v", st.Mode(), err)
	}
	if dst, err := os.Stat(filepath.Dir(GrantsPin(root, a))); err != nil || dst.Mode().Perm() != 0o700 {
		t.Fatalf("kept block's directory: %v %v", dst.Mode(), err)
	}
}
