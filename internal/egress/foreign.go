package egress

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// LEVER_EGRESS judges a packet once, at the filter OUTPUT hook. A rule anywhere else in the
// ruleset that changes where a packet goes AFTER that judgement sends it somewhere the
// chain never judged: a DNAT in a nat chain hooked on output at a priority after the filter
// (nft accepts `type nat hook output priority 100`), a payload rewrite (`ip daddr set`) in
// any chain, a netdev chain that forwards (`fwd to`) or duplicates (`dup to`) what lo or a
// device carries, a queue to a userspace program that may rewrite and reinject. An
// `accept` elsewhere is harmless (a drop in LEVER_EGRESS is final), so only statements
// that move or copy packets are read. ForeignRedirects finds them in `nft -j list
// ruleset`, in every table of every family, lever's own included.
//
// The one placement that is not drift: a DNAT or redirect reached only from nat chains on
// the output hook (the kernel runs every nat chain at the nat hook's own place, before the
// filter, whatever priority the chain names: a `type nat hook output priority 100` DNAT
// of an allowed port to a dropped one is still dropped, measured on 6.18 in
// TestEgressForeignRedirectE2E) or on prerouting, which locally made packets never cross.
// The filter then judges the rewritten packet. Lima's resolver chain (LIMADNS, from nat
// OUTPUT and PREROUTING) and podman's port forwards are of this kind.

// foreignStmt names the statements that move or copy a packet, with why each matters.
var foreignStmt = map[string]string{
	"dnat":     "rewrites the destination",
	"redirect": "rewrites the destination",
	"tproxy":   "hands the packet to another socket",
	"fwd":      "forwards the packet out of another device",
	"dup":      "sends a copy of the packet elsewhere",
	"queue":    "hands the packet to a userspace program that may rewrite and reinject it",
}

// xtTargets are xtables targets (shown by nft as `xt target "NAME"`) that do the same.
var xtTargets = map[string]bool{"DNAT": true, "REDIRECT": true, "NETMAP": true, "TEE": true, "NFQUEUE": true, "QUEUE": true, "TPROXY": true}

type nftChainInfo struct {
	family, table, name string
	base                bool
	typ, hook           string
	prio                int
}

type nftRuleInfo struct {
	family, table, chain string
	handle               int
	expr                 []any
}

// ForeignRedirects lists every rule in the ruleset that can send a packet somewhere
// LEVER_EGRESS did not judge; text (`nft -a list ruleset`) names the rules. Empty means none.
func ForeignRedirects(live, text string) ([]NFTFinding, error) {
	if strings.TrimSpace(live) == "" {
		return nil, nil
	}
	objs, err := nftObjects(live)
	if err != nil {
		return nil, fmt.Errorf("reading nft -j list ruleset: %w", err)
	}
	chains := map[string]*nftChainInfo{} // key: family table name
	var rules []nftRuleInfo
	for _, obj := range objs {
		for kind, body := range obj {
			if kind != "chain" && kind != "rule" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				return nil, fmt.Errorf("reading nft -j %s object: %w", kind, err)
			}
			fam, _ := m["family"].(string)
			tbl, _ := m["table"].(string)
			if kind == "chain" {
				c := &nftChainInfo{family: fam, table: tbl}
				c.name, _ = m["name"].(string)
				c.typ, _ = m["type"].(string)
				c.hook, c.base = m["hook"].(string)
				p, _ := m["prio"].(float64)
				c.prio = int(p)
				chains[fam+" "+tbl+" "+c.name] = c
				continue
			}
			r := nftRuleInfo{family: fam, table: tbl}
			r.chain, _ = m["chain"].(string)
			h, _ := m["handle"].(float64)
			r.handle = int(h)
			r.expr, _ = m["expr"].([]any)
			rules = append(rules, r)
		}
	}
	reach := reachers(chains, rules)
	texts := ruleTexts(text)
	var out []NFTFinding
	for _, r := range rules {
		why, dnat := movesPacket(r.expr)
		if why == "" {
			continue
		}
		key := r.family + " " + r.table + " " + r.chain
		from := reach[key]
		if dnat && beforeFilter(from) {
			continue
		}
		s, ok := texts[r.family+" "+r.table+" "+strconv.Itoa(r.handle)]
		if !ok {
			b, _ := json.Marshal(r.expr)
			s = string(b)
		}
		var via []string
		for _, b := range from {
			via = append(via, fmt.Sprintf("%s (type %s hook %s priority %d)", b.name, b.typ, b.hook, b.prio))
		}
		where := "reached from no base chain"
		if len(via) > 0 {
			where = "reached from " + strings.Join(via, ", ")
		}
		out = append(out, NFTFinding{Chain: r.chain, Handle: r.handle,
			What: fmt.Sprintf("table %s %s chain %s: `%s` %s outside what LEVER_EGRESS judges (%s); lever does not remove rules it did not write", r.family, r.table, r.chain, s, why, where)})
	}
	return out, nil
}

// beforeFilter: every base chain that reaches the rule is a nat chain the filter OUTPUT
// hook comes after (output) or one locally made packets never cross (prerouting). A rule
// no base chain reaches does nothing.
func beforeFilter(from []*nftChainInfo) bool {
	for _, b := range from {
		if b.family != "ip" && b.family != "ip6" && b.family != "inet" || b.typ != "nat" {
			return false
		}
		if b.hook != "prerouting" && b.hook != "output" {
			return false
		}
	}
	return true
}

// movesPacket says why a rule's statements can move or copy a packet, or "", and whether
// that is only a destination NAT (harmless before the filter). A rule with several such
// statements is judged by the first that is not a plain DNAT.
func movesPacket(expr []any) (why string, dnat bool) {
	for _, e := range expr {
		w, d := stmtMoves(e)
		if w == "" {
			continue
		}
		if !d {
			return w, false
		}
		why, dnat = w, true
	}
	return why, dnat
}

func stmtMoves(e any) (string, bool) {
	em, ok := e.(map[string]any)
	if !ok {
		return "", false
	}
	{
		for k, v := range em {
			if why, ok := foreignStmt[k]; ok {
				return why, k == "dnat" || k == "redirect"
			}
			switch k {
			case "mangle":
				// Setting a mark (meta, ct) changes no address; rewriting packet bytes can.
				mm, _ := v.(map[string]any)
				key, _ := mm["key"].(map[string]any)
				if _, meta := key["meta"]; meta {
					continue
				}
				if _, ct := key["ct"]; ct {
					continue
				}
				return "rewrites packet contents (" + canon(key) + ")", false
			case "xt":
				xm, _ := v.(map[string]any)
				name, _ := xm["name"].(string)
				if typ, _ := xm["type"].(string); typ == "target" && (xtTargets[name] || name == "") {
					return "is the xtables target " + strconv.Quote(name) + ", which moves or copies packets", name == "DNAT" || name == "REDIRECT" || name == "NETMAP"
				}
			}
		}
	}
	return "", false
}

// reachers maps each chain to the base chains that reach it by jump or goto, within its
// table. A rule that looks up a named verdict map (whose jumps are in the map, not the
// rule) is taken to reach every chain of its table.
func reachers(chains map[string]*nftChainInfo, rules []nftRuleInfo) map[string][]*nftChainInfo {
	edges := map[string]map[string]bool{}
	for _, r := range rules {
		from := r.family + " " + r.table + " " + r.chain
		if edges[from] == nil {
			edges[from] = map[string]bool{}
		}
		var walk func(v any)
		walk = func(v any) {
			switch x := v.(type) {
			case map[string]any:
				for k, val := range x {
					if k == "jump" || k == "goto" {
						if t, ok := val.(map[string]any); ok {
							if tgt, ok := t["target"].(string); ok {
								edges[from][r.family+" "+r.table+" "+tgt] = true
							}
						}
					}
					if k == "vmap" {
						if vm, ok := val.(map[string]any); ok {
							if d, ok := vm["data"].(string); ok && strings.HasPrefix(d, "@") {
								for ck, c := range chains {
									if c.family == r.family && c.table == r.table {
										edges[from][ck] = true
									}
								}
							}
						}
					}
					walk(val)
				}
			case []any:
				for _, y := range x {
					walk(y)
				}
			}
		}
		for _, e := range r.expr {
			walk(e)
		}
	}
	out := map[string][]*nftChainInfo{}
	var keys []string
	for k, c := range chains {
		if c.base {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		seen := map[string]bool{k: true}
		queue := []string{k}
		for len(queue) > 0 {
			c := queue[0]
			queue = queue[1:]
			out[c] = append(out[c], chains[k])
			for n := range edges[c] {
				if !seen[n] {
					seen[n] = true
					queue = append(queue, n)
				}
			}
		}
	}
	return out
}

var tableLineRE = regexp.MustCompile(`^table (\S+) (\S+) \{`)

// ruleTexts maps "family table handle" to the rule as `nft -a list ruleset` prints it.
func ruleTexts(listing string) map[string]string {
	out := map[string]string{}
	cur := ""
	for _, l := range strings.Split(listing, "\n") {
		if m := tableLineRE.FindStringSubmatch(l); m != nil {
			cur = m[1] + " " + m[2]
			continue
		}
		m := handleRE.FindStringSubmatch(l)
		if cur == "" || m == nil || strings.HasPrefix(m[1], "chain ") || strings.HasPrefix(m[1], "set ") || strings.HasPrefix(m[1], "map ") {
			continue
		}
		out[cur+" "+m[2]] = m[1]
	}
	return out
}
