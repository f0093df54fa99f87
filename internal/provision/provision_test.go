package provision

import (
	"strings"
	"testing"
)

func TestStampDecidesSkipOnlyForThisScriptAndBoot(t *testing.T) {
	p := Params{RunUser: "lever"}
	h := p.Hash()
	cases := []struct {
		name string
		out  string
		want bool
	}{
		{"current", "boot-1\n0 644\n" + h + " boot-1\n", true},
		{"other boot (guest rebooted)", "boot-2\n0 644\n" + h + " boot-1\n", false},
		{"other script", "boot-1\n0 644\n0123 boot-1\n", false},
		{"no stamp", "boot-1\nnone\n", false},
		{"stamp not root-owned", "boot-1\n1001 644\n" + h + " boot-1\n", false},
		{"stamp group-writable", "boot-1\n0 664\n" + h + " boot-1\n", false},
		{"stamp world-writable", "boot-1\n0 646\n" + h + " boot-1\n", false},
		{"empty boot id", "\n0 644\n" + h + " \n", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseState([]byte(tc.out)).Current(p); got != tc.want {
				t.Fatalf("Current = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHashNamesScriptAndParams(t *testing.T) {
	a := Params{RunUser: "lever"}.Hash()
	if b := (Params{RunUser: "other"}).Hash(); a == b {
		t.Error("run user not in the hash")
	}
	if b := (Params{RunUser: "lever", Packages: []string{"iptables"}}).Hash(); a == b {
		t.Error("packages not in the hash")
	}
	if a != (Params{}).Hash() {
		t.Error("defaults are not what an empty Params hashes to")
	}
	if !strings.Contains(Script(), "LEVER_STAMP") {
		t.Error("embedded script lacks the stamp step")
	}
}

func TestRunUserNameIsRefusedBeforeReachingTheGuest(t *testing.T) {
	for _, n := range []string{"Root", "a b", "x;rm -rf /", "-lever", strings.Repeat("a", 33), "lev$er"} {
		t.Run(n, func(t *testing.T) {
			r := &countRunner{}
			if _, err := Run(t.Context(), r, Params{RunUser: n, Stamp: "/x"}, false); err == nil || !strings.Contains(err.Error(), "run user") {
				t.Fatalf("got %v", err)
			}
			if r.n != 0 {
				t.Fatalf("%d guest calls made for a refused name", r.n)
			}
		})
	}
}
