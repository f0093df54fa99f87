package guest

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/egress"
)

// TestApplyScriptOrder: jump commits per family, then chain commits IPv6 first and IPv4
// last, each with its family's restore binary; the jump commit deletes exactly the copies
// the snapshot saw and declares the chain only where it is missing.
func TestApplyScriptOrder(t *testing.T) {
	rs, _ := egress.Render(egress.Inputs{Posture: egress.Open, AliasV4: netip.MustParseAddr("10.0.0.1")})
	snap := Snapshot{
		V4: egress.FamilyState{ChainExists: true, Output: []string{"-A OUTPUT -o lo -j ACCEPT", egress.JumpRule, egress.JumpRule}},
		V6: egress.FamilyState{ChainExists: false},
	}
	tools := Tools{IPTablesRestore: "/x/r4", IP6TablesRestore: "/x/r 6'q"}
	script := ApplyScript(tools, snap, rs)
	steps := regexp.MustCompile(`(?m)^sec (\w+) (.+) -w --noflush <<'LEVER_EOF'\n((?s:.*?))LEVER_EOF$`).FindAllStringSubmatch(script, -1)
	var got [][3]string
	for _, m := range steps {
		got = append(got, [3]string{m[1], m[2], m[3]})
	}
	want := [][3]string{
		{"j6", `'/x/r 6'\''q'`, egress.JumpRestore(false, 0)},
		{"j4", `'/x/r4'`, "*filter\n-D OUTPUT -j LEVER_EGRESS\n-D OUTPUT -j LEVER_EGRESS\n-I OUTPUT 1 -j LEVER_EGRESS\nCOMMIT\n"},
		{"c6", `'/x/r 6'\''q'`, egress.ChainRestore(rs.V6)},
		{"c4", `'/x/r4'`, egress.ChainRestore(rs.V4)},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("apply steps (-want +got):\n%s", d)
	}
	if !strings.Contains(egress.JumpRestore(false, 0), ":LEVER_EGRESS - [0:0]") || strings.Contains(egress.JumpRestore(true, 1), ":LEVER_EGRESS") {
		t.Error("jump commit must declare the chain only when it is missing")
	}
}
