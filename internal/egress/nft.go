package egress

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// On a guest whose iptables is the nf_tables variant, `iptables -S` is a translation: it
// prints what it can map back to xtables matches, prints some rules as broader ones (a
// concatenated-set lookup comes back as `-p tcp -j ACCEPT`), and refuses the whole table
// ("table 'filter' is incompatible, use 'nft' tool.") when one rule has no translation.
// The cross-check below closes that gap: the guest lists the filter table with `nft -j`,
// and also restores its own `iptables-save` of the table into a scratch network namespace
// and lists THAT with `nft -j`. Any difference between the two in LEVER_EGRESS or OUTPUT
// (or a chain, set or table flag the listing does not reproduce) is a rule iptables does
// not account for: drift.

// NFTChains are the chains whose every rule the cross-check accounts for.
var NFTChains = []string{"OUTPUT", Chain}

// nftRule is one rule of `nft -j list table`: its chain, handle and expressions with the
// counters taken out (iptables-nft adds one to every rule; its values are not policy).
type nftRule struct {
	chain  string
	handle int
	expr   string // canonical JSON of the expressions, counters removed
}

// nftTable is a parsed `nft -j list table` answer.
type nftTable struct {
	exists bool
	attrs  string            // the table object minus its handle
	chains map[string]string // chain name -> chain object minus its handle
	order  []string          // chain names in listing order
	rules  map[string][]nftRule
}

// parseNFT reads the filter table of nft family fam ("ip", "ip6") from `nft -j list
// ruleset` (or `list table`) output. Empty input, or no such table, is a missing table.
func parseNFT(raw, fam string) (nftTable, error) {
	t := nftTable{chains: map[string]string{}, rules: map[string][]nftRule{}}
	if strings.TrimSpace(raw) == "" {
		return t, nil
	}
	objs, err := nftObjects(raw)
	if err != nil {
		return t, fmt.Errorf("reading nft -j output: %w", err)
	}
	for _, obj := range objs {
		for kind, body := range obj {
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				return t, fmt.Errorf("reading nft -j %s object: %w", kind, err)
			}
			if kind == "metainfo" {
				continue
			}
			tbl, _ := m["table"].(string)
			if kind == "table" {
				tbl, _ = m["name"].(string)
			}
			if f, _ := m["family"].(string); f != fam || tbl != "filter" {
				continue
			}
			switch kind {
			case "table":
				t.exists = true
				delete(m, "handle")
				t.attrs = canon(m)
			case "chain":
				name, _ := m["name"].(string)
				delete(m, "handle")
				t.chains[name] = canon(m)
				t.order = append(t.order, name)
			case "rule":
				name, _ := m["chain"].(string)
				h, _ := m["handle"].(float64)
				exprs, _ := m["expr"].([]any)
				var kept []any
				for _, e := range exprs {
					if em, ok := e.(map[string]any); ok {
						if _, isCounter := em["counter"]; isCounter && len(em) == 1 {
							continue
						}
					}
					kept = append(kept, e)
				}
				// A rule's comment (userdata) is part of what it is, not its identity here:
				// keep it, so a rule iptables cannot show is never equal to one it can.
				r := map[string]any{"expr": kept}
				if c, ok := m["comment"]; ok {
					r["comment"] = c
				}
				t.rules[name] = append(t.rules[name], nftRule{chain: name, handle: int(h), expr: canon(r)})
			}
		}
	}
	return t, nil
}

func canon(v any) string {
	b, _ := json.Marshal(v) // maps marshal with sorted keys
	return string(b)
}

var handleRE = regexp.MustCompile(`^\s*(.*?)\s*# handle (\d+)$`)

// NFTRuleText maps the rule handles of family fam's filter table to the rule as
// `nft -a list ruleset` prints it, for messages.
func NFTRuleText(listing, fam string) map[int]string {
	out := map[int]string{}
	in := false
	for _, l := range strings.Split(listing, "\n") {
		if strings.HasPrefix(l, "table ") {
			in = strings.HasPrefix(l, "table "+fam+" filter ")
			continue
		}
		m := handleRE.FindStringSubmatch(l)
		if !in || m == nil || strings.HasPrefix(m[1], "chain ") || strings.HasPrefix(m[1], "set ") {
			continue
		}
		h, _ := strconv.Atoi(m[2])
		out[h] = m[1]
	}
	return out
}

// NFTCheck is one family's cross-check input, as the snapshot read it.
type NFTCheck struct {
	Family    string // nft's name of the family: ip or ip6
	Live      string // nft -j list ruleset
	RoundTrip string // the same, of iptables-save restored into a scratch namespace
	Text      string // nft -a list ruleset (names rules in messages)
}

// NFTFinding is one thing in the live table that the iptables listing does not account for.
type NFTFinding struct {
	Chain  string `json:"chain,omitempty"`
	Handle int    `json:"handle,omitempty"`
	What   string `json:"what"`
}

func (f NFTFinding) String() string {
	if f.Handle > 0 {
		return fmt.Sprintf("%s (nft handle %d)", f.What, f.Handle)
	}
	return f.What
}

// CrossCheck compares the live nft table with the round trip of its iptables listing and
// returns every difference, each naming the rule as nft prints it. Empty means iptables -S
// accounts for every rule, chain and object there.
func CrossCheck(f Family, c NFTCheck) ([]NFTFinding, error) {
	live, err := parseNFT(c.Live, c.Family)
	if err != nil {
		return nil, fmt.Errorf("%s: live table: %w", f, err)
	}
	rt, err := parseNFT(c.RoundTrip, c.Family)
	if err != nil {
		return nil, fmt.Errorf("%s: round trip of the iptables listing: %w", f, err)
	}
	text := NFTRuleText(c.Text, c.Family)
	name := func(r nftRule) string {
		if s, ok := text[r.handle]; ok {
			return "`" + s + "`"
		}
		return r.expr
	}
	var out []NFTFinding
	if live.exists && rt.exists && live.attrs != rt.attrs {
		out = append(out, NFTFinding{What: fmt.Sprintf("the filter table's attributes differ from what iptables makes: %s, iptables makes %s", live.attrs, rt.attrs)})
	}
	// Named sets and other objects act only through rules, and every rule of OUTPUT and
	// LEVER_EGRESS is checked below; an unreferenced set changes nothing.
	for _, ch := range live.order {
		want, ok := rt.chains[ch]
		switch {
		case !ok:
			out = append(out, NFTFinding{Chain: ch, What: fmt.Sprintf("chain %s (%s) is not in the iptables listing", ch, live.chains[ch])})
		case want != live.chains[ch]:
			out = append(out, NFTFinding{Chain: ch, What: fmt.Sprintf("chain %s is %s, iptables makes %s", ch, live.chains[ch], want)})
		}
	}
	for _, ch := range NFTChains {
		lr, rr := live.rules[ch], rt.rules[ch]
		w, g := exprs(rr), exprs(lr)
		for _, d := range diffRules(w, g) {
			switch d.Kind {
			case Extra, Reordered:
				r := lr[d.GotPos-1]
				out = append(out, NFTFinding{Chain: ch, Handle: r.handle, What: fmt.Sprintf("%s rule %d %s is not what iptables -S shows", ch, d.GotPos, name(r))})
			case Changed:
				r := lr[d.GotPos-1]
				out = append(out, NFTFinding{Chain: ch, Handle: r.handle, What: fmt.Sprintf("%s rule %d %s is listed by iptables -S as a different rule (its translation does not match it)", ch, d.GotPos, name(r))})
			case Missing:
				out = append(out, NFTFinding{Chain: ch, What: fmt.Sprintf("%s: iptables -S shows a rule at %d that nft does not hold as such", ch, d.WantPos)})
			}
		}
	}
	return out, nil
}

func exprs(rs []nftRule) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.expr
	}
	return out
}

// NFTRulesIn names every rule nft lists in chain (for a table iptables refuses to list).
func NFTRulesIn(c NFTCheck, chain string) ([]NFTFinding, error) {
	live, err := parseNFT(c.Live, c.Family)
	if err != nil {
		return nil, err
	}
	text := NFTRuleText(c.Text, c.Family)
	var out []NFTFinding
	for _, r := range live.rules[chain] {
		s, ok := text[r.handle]
		if !ok {
			s = r.expr
		}
		out = append(out, NFTFinding{Chain: chain, Handle: r.handle, What: chain + " holds `" + s + "`"})
	}
	return out, nil
}

// nftObjects decodes `nft -j` output into its top-level objects (each keyed by its kind:
// table, chain, rule, ...): the one reading of that document both the chain comparison and
// the foreign-rule scan start from.
func nftObjects(raw string) ([]map[string]json.RawMessage, error) {
	var doc struct {
		NFTables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(raw), &doc); err != nil {
		return nil, err
	}
	return doc.NFTables, nil
}
