package guest

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/egress"
)

// TestPlanOffline: the offline plan takes the operator's addresses, says they came from a
// flag, and plans the commits for a live chain with one jump copy; an IPv6 address given
// as the IPv4 alias is refused by the same PlanEgress a live plan uses.
func TestPlanOffline(t *testing.T) {
	spec := EgressSpec{Posture: egress.Closed, Ports: []int{7443}}
	for _, tc := range []struct {
		name     string
		v4, v6   string
		wantErr  string
		wantRule string
	}{
		{"v4 and v6", "10.1.2.3", "fd00::3", "", "-A LEVER_EGRESS -d fd00::3/128 -p tcp -m tcp --dport 7443 -j ACCEPT"},
		{"v4 only", "10.1.2.3", "", "", "-A LEVER_EGRESS -d 10.1.2.3/32 -p tcp -m tcp --dport 7443 -j ACCEPT"},
		{"v6 given as v4", "fd00::1", "", "host alias IPv4 address", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v6 netip.Addr
			if tc.v6 != "" {
				v6 = netip.MustParseAddr(tc.v6)
			}
			d, snap, err := PlanOffline(spec, netip.MustParseAddr(tc.v4), v6)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.AliasSource != AliasFromFlag || d.AliasV4 != tc.v4 || d.AliasV6 != tc.v6 {
				t.Fatalf("desired %q %q from %q", d.AliasV4, d.AliasV6, d.AliasSource)
			}
			commits := PlannedCommits(snap, d.Ruleset)
			if len(commits) != 2 || commits[0].Family != egress.V6 || commits[1].Family != egress.V4 || commits[0].Order != 1 {
				t.Fatalf("commit order %+v", commits)
			}
			var all string
			for _, c := range commits {
				if c.Live.JumpCopies() != 1 || c.JumpRestore != egress.JumpRestore(true, 1) {
					t.Errorf("%s: offline snapshot should hold one jump in a live chain: %q", c.Family, c.JumpRestore)
				}
				all += c.ChainRestore
			}
			if !strings.Contains(all, tc.wantRule) {
				t.Errorf("%q not in the chain commits:\n%s", tc.wantRule, all)
			}
		})
	}
}

// TestTypedStatesKeepTheirJSON: Outcome and AliasSource are types now; the JSON they
// appear in (lever egress apply/verify/plan --json) is what it was as strings.
func TestTypedStatesKeepTheirJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"unchanged", Report{Outcome: Unchanged}, `"outcome":"unchanged"`},
		{"rebuilt", Report{Outcome: Rebuilt}, `"outcome":"rebuilt"`},
		{"drifted", Report{Outcome: Drifted}, `"outcome":""`},
		{"lookup", Desired{AliasSource: AliasFromLookup}, `"alias_source":"lookup"`},
		{"live chain", Desired{AliasSource: AliasFromLiveChain}, `"alias_source":"live-chain"`},
		{"flag", Desired{AliasSource: AliasFromFlag}, `"alias_source":"flag"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil || !strings.Contains(string(b), tc.want) {
				t.Fatalf("%s: %s %v", tc.want, b, err)
			}
		})
	}
}
