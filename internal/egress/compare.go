package egress

import (
	"fmt"
	"slices"
	"strings"
)

// RuleDiffKind names how one rule differs.
type RuleDiffKind string

const (
	Missing   RuleDiffKind = "missing"   // desired, not live
	Extra     RuleDiffKind = "extra"     // live, not desired
	Changed   RuleDiffKind = "changed"   // a live rule stands where a different one should
	Reordered RuleDiffKind = "reordered" // live, but not where it should be
)

// RuleDiff is one rule-level difference. Positions are 1-based within the chain; 0 means
// "not there".
type RuleDiff struct {
	Kind    RuleDiffKind `json:"kind"`
	Want    string       `json:"want,omitempty"`
	Got     string       `json:"got,omitempty"`
	WantPos int          `json:"want_pos,omitempty"`
	GotPos  int          `json:"got_pos,omitempty"`
}

// FamilyDiff is how one family's live state differs from the desired one.
type FamilyDiff struct {
	Family         string     `json:"family"`
	ChainMissing   bool       `json:"chain_missing,omitempty"`
	JumpMissing    bool       `json:"jump_missing,omitempty"`
	JumpNotFirst   bool       `json:"jump_not_first,omitempty"`
	JumpDuplicated bool       `json:"jump_duplicated,omitempty"`
	JumpCopies     int        `json:"jump_copies"`
	AheadOfJump    []string   `json:"ahead_of_jump,omitempty"`
	Rules          []RuleDiff `json:"rules,omitempty"`
	// Unlisted / Unaccounted: the nf_tables cross-check (FamilyState).
	Unlisted    string   `json:"unlisted,omitempty"`
	Unaccounted []string `json:"unaccounted,omitempty"`
}

// ChainMatches reports whether the chain itself is exactly as desired.
func (d FamilyDiff) ChainMatches() bool {
	return !d.ChainMissing && len(d.Rules) == 0 && d.Unlisted == "" && len(d.Unaccounted) == 0
}

// JumpOK reports whether the jump is OUTPUT's first rule and its only copy.
func (d FamilyDiff) JumpOK() bool { return !d.JumpMissing && !d.JumpNotFirst && !d.JumpDuplicated }

// Match reports an exact match for the family.
func (d FamilyDiff) Match() bool { return d.ChainMatches() && d.JumpOK() }

// Diff is the result of verification: both families, and whether the state is half
// applied (one family's chain is the desired one, the other's is not).
type Diff struct {
	V4          FamilyDiff `json:"ipv4"`
	V6          FamilyDiff `json:"ipv6"`
	HalfApplied bool       `json:"half_applied,omitempty"`
	// Foreign names rules outside lever's chains, in any table, that can send a packet
	// somewhere LEVER_EGRESS did not judge (ForeignRedirects; nf_tables guests).
	Foreign []string `json:"foreign,omitempty"`
}

// Match reports an exact match in both families and nothing that routes around them.
func (d Diff) Match() bool { return d.OwnMatch() && len(d.Foreign) == 0 }

// OwnMatch reports an exact match of lever's own chains in both families (what apply can
// repair), whatever else the ruleset holds.
func (d Diff) OwnMatch() bool { return d.V4.Match() && d.V6.Match() }

// Family returns the family's part.
func (d Diff) Family(f Family) FamilyDiff {
	if f == V6 {
		return d.V6
	}
	return d.V4
}

// Lines renders the differences for people, one per line, IPv4 first.
func (d Diff) Lines() []string {
	var out []string
	for _, fd := range []FamilyDiff{d.V4, d.V6} {
		out = append(out, fd.Lines()...)
	}
	if d.HalfApplied {
		holds, not := "IPv6", "IPv4"
		if d.V4.ChainMatches() {
			holds, not = "IPv4", "IPv6"
		}
		out = append(out, fmt.Sprintf("half-applied: %s holds the desired chain, %s does not", holds, not))
	}
	for _, f := range d.Foreign {
		out = append(out, "routes around LEVER_EGRESS: "+f)
	}
	return out
}

// Lines renders one family's differences.
func (d FamilyDiff) Lines() []string {
	var out []string
	p := d.Family + ": "
	if d.Unlisted != "" {
		out = append(out, p+"iptables cannot list the filter table ("+d.Unlisted+"): a rule written with nft that iptables cannot translate is there")
	}
	for _, u := range d.Unaccounted {
		out = append(out, p+"not accounted for by iptables -S: "+u)
	}
	if d.ChainMissing {
		out = append(out, p+"chain "+Chain+" missing")
	}
	if d.JumpMissing {
		out = append(out, p+"jump missing from OUTPUT")
	}
	if d.JumpNotFirst {
		out = append(out, p+"jump not first in OUTPUT; ahead of it: "+strings.Join(quoteAll(d.AheadOfJump), ", "))
	}
	if d.JumpDuplicated {
		out = append(out, fmt.Sprintf("%sjump duplicated in OUTPUT (%d copies)", p, d.JumpCopies))
	}
	for _, r := range d.Rules {
		switch r.Kind {
		case Missing:
			out = append(out, fmt.Sprintf("%srule %d missing: `%s`", p, r.WantPos, r.Want))
		case Extra:
			out = append(out, fmt.Sprintf("%sextra rule at %d: `%s`", p, r.GotPos, r.Got))
		case Changed:
			out = append(out, fmt.Sprintf("%srule %d changed: want `%s`, got `%s`", p, r.WantPos, r.Want, r.Got))
		case Reordered:
			out = append(out, fmt.Sprintf("%srule reordered: `%s` wanted at %d, found at %d", p, r.Want, r.WantPos, r.GotPos))
		}
	}
	return out
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = "`" + s + "`"
	}
	return out
}

// Compare verifies both families against the desired ruleset, rule for rule and in order.
func Compare(desired Ruleset, live4, live6 FamilyState) Diff {
	d := Diff{V4: CompareFamily(V4, desired.V4, live4), V6: CompareFamily(V6, desired.V6, live6)}
	d.HalfApplied = d.V4.ChainMatches() != d.V6.ChainMatches()
	return d
}

// CompareFamily verifies one family.
func CompareFamily(f Family, desired []string, live FamilyState) FamilyDiff {
	d := FamilyDiff{Family: f.String(), Unlisted: live.Unlisted}
	for _, u := range live.Unaccounted {
		d.Unaccounted = append(d.Unaccounted, u.String())
	}
	if live.Unlisted != "" {
		// iptables showed nothing: the chain and OUTPUT are unknown, so nothing else can
		// be said about them (Unaccounted names what nft shows there).
		return d
	}
	d.JumpCopies = live.JumpCopies()
	first := slices.Index(live.Output, JumpRule)
	switch {
	case first < 0:
		d.JumpMissing = true
	case first > 0:
		d.JumpNotFirst = true
		d.AheadOfJump = append([]string(nil), live.Output[:first]...)
	}
	d.JumpDuplicated = d.JumpCopies > 1
	if !live.ChainExists {
		d.ChainMissing = true
		return d
	}
	d.Rules = diffRules(desired, live.Chain)
	return d
}

// diffRules aligns want and got by their longest common subsequence; what is left over is
// classified: a rule present on both sides but outside the alignment was reordered; within
// one gap between aligned rules, leftovers pair up as changed; the rest are missing or
// extra.
func diffRules(want, got []string) []RuleDiff {
	// Common prefix and suffix are aligned trivially; only the middle needs the DP.
	pre := 0
	for pre < len(want) && pre < len(got) && want[pre] == got[pre] {
		pre++
	}
	suf := 0
	for suf < len(want)-pre && suf < len(got)-pre && want[len(want)-1-suf] == got[len(got)-1-suf] {
		suf++
	}
	w, g := want[pre:len(want)-suf], got[pre:len(got)-suf]
	if len(w) == 0 && len(g) == 0 {
		return nil
	}
	// gapW[i] / gapG[j]: index of the alignment gap each unmatched element sits in.
	matchW := make([]bool, len(w))
	matchG := make([]bool, len(g))
	gapW := make([]int, len(w))
	gapG := make([]int, len(g))
	lcs(w, g, matchW, matchG)
	gap := 0
	for i := range w {
		if matchW[i] {
			gap++
		}
		gapW[i] = gap
	}
	gap = 0
	for j := range g {
		if matchG[j] {
			gap++
		}
		gapG[j] = gap
	}
	var out []RuleDiff
	// Reordered: same text on both sides, outside the alignment.
	usedG := make([]bool, len(g))
	usedW := make([]bool, len(w))
	free := map[string][]int{} // unmatched live positions by text, in order
	for j := range g {
		if !matchG[j] {
			free[g[j]] = append(free[g[j]], j)
		}
	}
	for i := range w {
		if matchW[i] {
			continue
		}
		if js := free[w[i]]; len(js) > 0 {
			j := js[0]
			free[w[i]] = js[1:]
			usedG[j], usedW[i] = true, true
			out = append(out, RuleDiff{Kind: Reordered, Want: w[i], Got: g[j], WantPos: pre + i + 1, GotPos: pre + j + 1})
		}
	}
	// Changed: leftovers in the same gap pair up in order.
	j := 0
	for i := range w {
		if matchW[i] || usedW[i] {
			continue
		}
		for j < len(g) && (matchG[j] || usedG[j] || gapG[j] < gapW[i]) {
			j++
		}
		if j < len(g) && gapG[j] == gapW[i] {
			usedG[j], usedW[i] = true, true
			out = append(out, RuleDiff{Kind: Changed, Want: w[i], Got: g[j], WantPos: pre + i + 1, GotPos: pre + j + 1})
			j++
		}
	}
	for i := range w {
		if !matchW[i] && !usedW[i] {
			out = append(out, RuleDiff{Kind: Missing, Want: w[i], WantPos: pre + i + 1})
		}
	}
	for j := range g {
		if !matchG[j] && !usedG[j] {
			out = append(out, RuleDiff{Kind: Extra, Got: g[j], GotPos: pre + j + 1})
		}
	}
	sortDiffs(out)
	return out
}

func sortDiffs(ds []RuleDiff) {
	pos := func(r RuleDiff) int {
		if r.WantPos > 0 {
			return r.WantPos
		}
		return r.GotPos
	}
	// insertion sort: lists are short and the order must be stable
	for i := 1; i < len(ds); i++ {
		for k := i; k > 0 && pos(ds[k]) < pos(ds[k-1]); k-- {
			ds[k], ds[k-1] = ds[k-1], ds[k]
		}
	}
}

// lcs marks the elements of a longest common subsequence of w and g.
func lcs(w, g []string, matchW, matchG []bool) {
	n, m := len(w), len(g)
	if n == 0 || m == 0 {
		return
	}
	// table[i][j] = LCS length of w[i:], g[j:]
	table := make([]int32, (n+1)*(m+1))
	at := func(i, j int) int32 { return table[i*(m+1)+j] }
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			v := at(i+1, j)
			if w[i] == g[j] {
				v = at(i+1, j+1) + 1
			} else if x := at(i, j+1); x > v {
				v = x
			}
			table[i*(m+1)+j] = v
		}
	}
	for i, j := 0, 0; i < n && j < m; {
		switch {
		case w[i] == g[j]:
			matchW[i], matchG[j] = true, true
			i++
			j++
		case at(i+1, j) >= at(i, j+1):
			i++
		default:
			j++
		}
	}
}
