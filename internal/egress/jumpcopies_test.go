package egress

import (
	"strings"
	"testing"
)

// TestJumpCopiesOneCount: the copies of the jump are counted in one place, and verify
// (CompareFamily) and the jump commit (JumpCommit) both take that count: a look-alike
// rule (another target, a match in front, another chain's jump) is not a copy, and the
// commit deletes exactly the copies there are.
func TestJumpCopiesOneCount(t *testing.T) {
	other := "-A OUTPUT -o lo -j ACCEPT"
	lookAlikes := []string{
		"-A OUTPUT -o eth0 -j " + Chain,
		"-A OUTPUT -j " + Chain + "2",
		"-A FORWARD -j " + Chain,
	}
	for _, tc := range []struct {
		name          string
		live          FamilyState
		copies        int
		missing, dup  bool
		notFirst      bool
		declaresChain bool
	}{
		{"none, chain absent", FamilyState{}, 0, true, false, false, true},
		{"one, first", FamilyState{ChainExists: true, Output: []string{JumpRule, other}}, 1, false, false, false, false},
		{"one, behind another rule", FamilyState{ChainExists: true, Output: []string{other, JumpRule}}, 1, false, false, true, false},
		{"three copies", FamilyState{ChainExists: true, Output: []string{JumpRule, other, JumpRule, JumpRule}}, 3, false, true, false, false},
		{"look-alikes only", FamilyState{ChainExists: true, Output: lookAlikes}, 0, true, false, false, false},
		{"look-alikes and one copy", FamilyState{ChainExists: true, Output: append([]string{JumpRule}, lookAlikes...)}, 1, false, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := tc.live.JumpCopies(); n != tc.copies {
				t.Fatalf("JumpCopies = %d, want %d", n, tc.copies)
			}
			d := CompareFamily(V4, nil, tc.live)
			if d.JumpCopies != tc.copies || d.JumpMissing != tc.missing || d.JumpDuplicated != tc.dup || d.JumpNotFirst != tc.notFirst {
				t.Errorf("CompareFamily: copies %d missing %v dup %v notFirst %v", d.JumpCopies, d.JumpMissing, d.JumpDuplicated, d.JumpNotFirst)
			}
			commit := tc.live.JumpCommit()
			if n := strings.Count(commit, "-D OUTPUT -j "+Chain+"\n"); n != tc.copies {
				t.Errorf("JumpCommit deletes %d copies, want %d:\n%s", n, tc.copies, commit)
			}
			if commit != JumpRestore(tc.live.ChainExists, tc.copies) {
				t.Errorf("JumpCommit differs from JumpRestore(%v, %d)", tc.live.ChainExists, tc.copies)
			}
			if strings.Contains(commit, ":"+Chain+" ") != tc.declaresChain {
				t.Errorf("JumpCommit declares the chain: %v, want %v", !tc.declaresChain, tc.declaresChain)
			}
		})
	}
}
