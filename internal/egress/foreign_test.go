package egress

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestForeignRedirects reads a ruleset captured from real nft 1.0.6 (testdata/foreign:
// made in a scratch namespace with iptables-nft and nft) holding one of each kind: Lima's
// LIMADNS DNAT from nat OUTPUT and PREROUTING, a MASQUERADE and an SNAT, a nat-output
// DNAT at priority 100 and a meta mark (none of which moves a packet past the filter);
// a payload rewrite reached only through a named verdict map, one no chain reaches,
// netdev egress dup and fwd, and iptables' TEE (which nft shows as dup).
func TestForeignRedirects(t *testing.T) {
	live, err := os.ReadFile("testdata/foreign/ruleset.json")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile("testdata/foreign/ruleset.txt")
	got, err := ForeignRedirects(string(live), string(text))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range got {
		names = append(names, f.What)
	}
	want := []string{
		"table inet t chain vm: `tcp dport 80 ip daddr set 192.0.2.1` rewrites packet contents",
		"table inet t chain unreach: `ip daddr set 192.0.2.9` rewrites packet contents",
		"table netdev n chain e: `dup to \"d0\"` sends a copy of the packet elsewhere",
		"table netdev n chain e: `fwd to \"d0\"` forwards the packet out of another device",
		"table ip mangle chain POSTROUTING: `counter packets 0 bytes 0 dup to 192.0.2.5` is the xtables target \"TEE\"", // nft prints TEE as dup; its JSON says xt
	}
	for _, w := range want {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, w) }) {
			t.Errorf("not found: %s", w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d findings, want %d:\n%s", len(got), len(want), strings.Join(names, "\n"))
	}
	for _, n := range names {
		for _, clean := range []string{"LIMADNS", "MASQUERADE", "snat", "meta mark", "nat100"} {
			if strings.Contains(n, clean) {
				t.Errorf("reported a rule that moves nothing past the filter: %s", n)
			}
		}
	}
	// The verdict-map row names the base chain that reaches it.
	if i := slices.IndexFunc(names, func(n string) bool { return strings.Contains(n, "chain vm:") }); i < 0 || !strings.Contains(names[i], "reached from post (type filter hook postrouting priority 0)") {
		t.Errorf("verdict map reach: %v", names)
	}
	if f, _ := ForeignRedirects("", ""); f != nil {
		t.Errorf("empty ruleset: %v", f)
	}
	if _, err := ForeignRedirects("{", ""); err == nil {
		t.Error("malformed JSON accepted")
	}
}
