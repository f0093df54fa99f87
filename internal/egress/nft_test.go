package egress

import (
	"fmt"
	"strings"
	"testing"
)

// nftDoc builds an `nft -j list table ip filter` answer from objects.
func nftDoc(objs ...string) string {
	return `{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}, ` + strings.Join(objs, ", ") + `]}`
}

func table(extra string) string {
	return `{"table": {"family": "ip", "name": "filter", "handle": 1` + extra + `}}`
}

func chain(name, base string, h int) string {
	return fmt.Sprintf(`{"chain": {"family": "ip", "table": "filter", "name": %q, "handle": %d%s}}`, name, h, base)
}

const outputBase = `, "type": "filter", "hook": "output", "prio": 0, "policy": "accept"`

func rule(ch string, h int, expr string) string {
	return fmt.Sprintf(`{"rule": {"family": "ip", "table": "filter", "chain": %q, "handle": %d, "expr": [%s]}}`, ch, h, expr)
}

const (
	jumpExpr   = `{"counter": {"packets": 7, "bytes": 900}}, {"jump": {"target": "LEVER_EGRESS"}}`
	brokerExpr = `{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "10.0.0.1"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 7443}}, {"counter": {"packets": 3, "bytes": 180}}, {"accept": null}`
	dropExpr   = `{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": {"prefix": {"addr": "10.0.0.0", "len": 8}}}}, {"counter": {"packets": 0, "bytes": 0}}, {"drop": null}`
	// the look-alike: prints as the broker rule, rewrites the destination
	lookAlike = `{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "10.0.0.1"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 7443}}, {"mangle": {"key": {"payload": {"protocol": "ip", "field": "daddr"}}, "value": "192.168.77.1"}}, {"accept": null}`
	concatSet = `{"match": {"op": "==", "left": {"concat": [{"payload": {"protocol": "ip", "field": "daddr"}}, {"payload": {"protocol": "tcp", "field": "dport"}}]}, "right": "@s"}}, {"accept": null}`
	tcpAccept = `{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}, {"counter": {"packets": 0, "bytes": 0}}, {"accept": null}`
)

// The round trip: what iptables-restore makes of the listing (counters zero, other handles).
func roundTrip(chainRules ...string) string {
	objs := []string{table(""), chain("INPUT", `, "type": "filter", "hook": "input", "prio": 0, "policy": "accept"`, 1), chain("OUTPUT", outputBase, 3), chain("LEVER_EGRESS", "", 4),
		rule("OUTPUT", 5, strings.ReplaceAll(jumpExpr, `"packets": 7, "bytes": 900`, `"packets": 0, "bytes": 0`))}
	for i, r := range chainRules {
		objs = append(objs, rule("LEVER_EGRESS", 6+i, r))
	}
	return nftDoc(objs...)
}

func TestCrossCheck(t *testing.T) {
	text := "table ip filter { # handle 1\n\tchain LEVER_EGRESS { # handle 1\n\t\tip daddr 10.0.0.1 tcp dport 7443 ip daddr set 192.168.77.1 accept # handle 16\n\t\tip daddr . tcp dport @s accept # handle 17\n\t}\n}\n"
	liveOf := func(tableExtra string, extraChains []string, chainRules ...string) string {
		objs := append([]string{table(tableExtra), chain("LEVER_EGRESS", "", 1), chain("OUTPUT", outputBase, 2)}, extraChains...)
		objs = append(objs, rule("OUTPUT", 12, jumpExpr))
		for i, r := range chainRules {
			objs = append(objs, rule("LEVER_EGRESS", 16+i, r))
		}
		return nftDoc(objs...)
	}
	cases := []struct {
		name string
		live string
		rt   string
		want []string // substrings, one finding each, in order; nil = clean
	}{
		{"as iptables made it (counters differ): clean", liveOf("", nil, brokerExpr, dropExpr), roundTrip(brokerExpr, dropExpr), nil},
		{"look-alike that rewrites the destination", liveOf("", nil, lookAlike, dropExpr), roundTrip(brokerExpr, dropExpr),
			[]string{"LEVER_EGRESS rule 1 `ip daddr 10.0.0.1 tcp dport 7443 ip daddr set 192.168.77.1 accept` is listed by iptables -S as a different rule"}},
		{"concatenated set printed as -p tcp -j ACCEPT", liveOf("", nil, brokerExpr, concatSet), roundTrip(brokerExpr, tcpAccept),
			[]string{"LEVER_EGRESS rule 2 `ip daddr . tcp dport @s accept` is listed by iptables -S as a different rule"}},
		{"a rule iptables leaves out of its listing", liveOf("", nil, brokerExpr, concatSet, dropExpr), roundTrip(brokerExpr, dropExpr),
			[]string{"LEVER_EGRESS rule 2 `ip daddr . tcp dport @s accept` is not what iptables -S shows"}},
		{"a rule nft does not hold", liveOf("", nil, brokerExpr), roundTrip(brokerExpr, dropExpr),
			[]string{"LEVER_EGRESS: iptables -S shows a rule at 2 that nft does not hold as such"}},
		{"dormant table", liveOf(`, "flags": "dormant"`, nil, brokerExpr), roundTrip(brokerExpr),
			[]string{"the filter table's attributes differ"}},
		{"an extra base chain", liveOf("", []string{chain("EARLY", `, "type": "filter", "hook": "output", "prio": -10, "policy": "accept"`, 9)}, brokerExpr), roundTrip(brokerExpr),
			[]string{"chain EARLY"}},
		{"no table on either side", "", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, err := CrossCheck(V4, NFTCheck{Family: "ip", Live: c.live, RoundTrip: c.rt, Text: text})
			if err != nil {
				t.Fatal(err)
			}
			if len(fs) != len(c.want) {
				t.Fatalf("findings %q, want %d", fs, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(fs[i].String(), w) {
					t.Errorf("finding %d = %q, want it to contain %q", i, fs[i], w)
				}
			}
		})
	}
	if _, err := CrossCheck(V4, NFTCheck{Family: "ip", Live: "{not json"}); err == nil {
		t.Error("malformed nft output was accepted")
	}
}

// A table iptables refuses to list: every rule of the chain is named from nft's view.
func TestNFTRulesIn(t *testing.T) {
	live := nftDoc(table(""), chain("OUTPUT", outputBase, 2), rule("OUTPUT", 6, `{"match": {"op": "==", "left": {"numgen": {"mode": "random", "mod": 2, "offset": 0}}, "right": 0}}, {"accept": null}`), rule("OUTPUT", 12, jumpExpr))
	text := "table ip6 filter { # handle 1\n\tchain OUTPUT { # handle 2\n\t\tip6 daddr ::1 accept # handle 6\n\t}\n}\ntable ip filter { # handle 1\n\tchain OUTPUT { # handle 2\n\t\tnumgen random mod 2 0 accept # handle 6\n\t\tcounter packets 0 bytes 0 jump LEVER_EGRESS # handle 12\n"
	fs, err := NFTRulesIn(NFTCheck{Family: "ip", Live: live, Text: text}, "OUTPUT")
	if err != nil || len(fs) != 2 || fs[0].String() != "OUTPUT holds `numgen random mod 2 0 accept` (nft handle 6)" {
		t.Fatalf("%q %v", fs, err)
	}
}
