package guest

import (
	"net/netip"

	"github.com/lever-jail/lever/internal/egress"
)

// OfflineSnapshot is the snapshot an offline plan assumes when no guest is read: the alias
// resolved to v4 (and v6, when valid), and in each family a live chain with OUTPUT holding
// exactly one copy of the jump, the steady state of a jail lever has applied before.
func OfflineSnapshot(v4, v6 netip.Addr) Snapshot {
	jump := []string{egress.JumpRule}
	return Snapshot{
		ResolvedV4: v4,
		ResolvedV6: v6,
		V4:         egress.FamilyState{ChainExists: true, Output: jump},
		V6:         egress.FamilyState{ChainExists: true, Output: jump},
	}
}

// PlanOffline is PlanEgress on OfflineSnapshot(v4, v6): the plan for addresses given by the
// operator rather than resolved in the guest. It makes no guest call.
func PlanOffline(spec EgressSpec, v4, v6 netip.Addr) (Desired, Snapshot, error) {
	snap := OfflineSnapshot(v4, v6)
	d, err := PlanEgress(spec, snap)
	if err != nil {
		return Desired{}, snap, err
	}
	d.AliasSource = AliasFromFlag
	return d, snap, nil
}

// FamilyCommit is one family's two restore inputs as ApplyEgress would commit them from a
// snapshot: the jump commit and the chain commit.
type FamilyCommit struct {
	Family egress.Family
	// Order is the family's place in the commit order (1 = first).
	Order int
	// Live is the family's state the commits were planned from.
	Live         egress.FamilyState
	Rules        []string
	JumpRestore  string
	ChainRestore string
}

// PlannedCommits lists, in commit order (IPv6 first, IPv4 last), what ApplyEgress would
// commit in each family to turn snap into desired.
func PlannedCommits(snap Snapshot, desired egress.Ruleset) []FamilyCommit {
	var out []FamilyCommit
	for i, f := range egress.Families {
		live := snap.Family(f)
		out = append(out, FamilyCommit{
			Family:       f,
			Order:        i + 1,
			Live:         live,
			Rules:        desired.Rules(f),
			JumpRestore:  live.JumpCommit(),
			ChainRestore: egress.ChainRestore(desired.Rules(f)),
		})
	}
	return out
}
