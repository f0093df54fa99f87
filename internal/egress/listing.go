package egress

import (
	"fmt"
	"strings"
)

// Table is one table's `iptables -S` listing, parsed.
type Table struct {
	// Policies maps each built-in chain to its policy (-P lines).
	Policies map[string]string
	// Chains lists the user chains in listing order (-N lines).
	Chains []string
	// Rules maps a chain to its rules, each the full `-A CHAIN ...` line, in order.
	Rules map[string][]string
}

// HasChain reports whether the listing declares (or holds rules for) chain.
func (t Table) HasChain(chain string) bool {
	if _, ok := t.Policies[chain]; ok {
		return true
	}
	for _, c := range t.Chains {
		if c == chain {
			return true
		}
	}
	return false
}

// ParseTable parses `iptables -S` (or `ip6tables -S`, whole table or one chain). Lines
// iptables-nft adds as comments ("# Warning: iptables-legacy tables present") are skipped;
// anything else it does not recognise is an error naming the line.
func ParseTable(text string) (Table, error) {
	t := Table{Policies: map[string]string{}, Rules: map[string][]string{}}
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r ")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case f[0] == "-P" && len(f) == 3:
			t.Policies[f[1]] = f[2]
		case f[0] == "-N" && len(f) == 2:
			t.Chains = append(t.Chains, f[1])
		case f[0] == "-A" && len(f) >= 2:
			// Keep the line as printed, with single spaces, so comparison is textual.
			t.Rules[f[1]] = append(t.Rules[f[1]], strings.Join(f, " "))
		default:
			return Table{}, fmt.Errorf("iptables listing line %d: unrecognised %q", n+1, line)
		}
	}
	return t, nil
}

// FamilyState is what verification needs from one family's filter table.
type FamilyState struct {
	ChainExists bool     `json:"chain_exists"`
	Chain       []string `json:"chain"`  // LEVER_EGRESS rules, full -A lines
	Output      []string `json:"output"` // OUTPUT rules, full -A lines
	// NFTables: the guest's iptables is the nf_tables variant, so the snapshot also read
	// the table with nft and cross-checked it (see CrossCheck).
	NFTables bool `json:"nftables,omitempty"`
	// Unlisted is why iptables -S refused to list the table ("table 'filter' is
	// incompatible"): a rule iptables cannot translate is there. Chain and Output are then
	// unknown to iptables; Unaccounted names what nft shows in OUTPUT and LEVER_EGRESS.
	Unlisted string `json:"unlisted,omitempty"`
	// Unaccounted is everything the nft cross-check found that the iptables listing does not
	// account for.
	Unaccounted []NFTFinding `json:"unaccounted,omitempty"`
	// RebuildOutput: OUTPUT holds a rule iptables cannot list or delete (or the table could
	// not be listed at all), so apply replaces OUTPUT with the jump alone, atomically, with nft.
	RebuildOutput bool `json:"rebuild_output,omitempty"`
}

// JumpCopies is how many copies of the jump OUTPUT holds: what verification judges (one,
// first) and what the jump commit must delete before it inserts the one copy.
func (s FamilyState) JumpCopies() int {
	n := 0
	for _, r := range s.Output {
		if r == JumpRule {
			n++
		}
	}
	return n
}

// StateFromTable extracts the chain and OUTPUT from a parsed filter table.
func StateFromTable(t Table) FamilyState {
	return FamilyState{
		ChainExists: t.HasChain(Chain),
		Chain:       t.Rules[Chain],
		Output:      t.Rules["OUTPUT"],
	}
}

// ParseFamily parses one family's whole filter-table listing into its state.
func ParseFamily(f Family, listing string) (FamilyState, error) {
	t, err := ParseTable(listing)
	if err != nil {
		return FamilyState{}, fmt.Errorf("%s filter table: %w", f, err)
	}
	return StateFromTable(t), nil
}
