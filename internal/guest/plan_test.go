package guest

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/egress"
)

func TestPlanEgressAlias(t *testing.T) {
	a4, a6 := netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("fd4c:7600::1")
	closed, _ := egress.Render(egress.Inputs{Posture: egress.Closed, AliasV4: a4, AliasV6: a6, Ports: []int{7443}})
	open, _ := egress.Render(egress.Inputs{Posture: egress.Open, AliasV4: a4, AliasV6: a6})
	j := []string{egress.JumpRule}
	live := func(rs egress.Ruleset) (egress.FamilyState, egress.FamilyState) {
		return egress.FamilyState{ChainExists: true, Chain: rs.V4, Output: j}, egress.FamilyState{ChainExists: true, Chain: rs.V6, Output: j}
	}
	c4, c6 := live(closed)
	o4, o6 := live(open)
	failed := "getent ahosts host.lever.internal: no IPv4 address (exit 2)"
	for _, tc := range []struct {
		name      string
		posture   egress.Posture
		snap      Snapshot
		wantErr   string
		wantV4    string
		wantV6    string
		wantSrc   AliasSource
		wantWarns string
	}{
		{"lookup ok", egress.Open, Snapshot{V4: o4, V6: o6, ResolvedV4: netip.MustParseAddr("10.9.9.9")}, "", "10.9.9.9", "", AliasFromLookup, ""},
		{"lookup ok with v6, mapped ignored upstream", egress.Closed, Snapshot{V4: o4, V6: o6, ResolvedV4: a4, ResolvedV6: a6}, "", "10.77.0.1", "fd4c:7600::1", AliasFromLookup, ""},
		{"closed chain, lookup failed: read back", egress.Closed, Snapshot{V4: c4, V6: c6, LookupError: failed}, "", "10.77.0.1", "fd4c:7600::1", AliasFromLiveChain, "using the aliases the live chains name: IPv4 10.77.0.1, IPv6 fd4c:7600::1"},
		{"closed v4 only, open to closed switch still reads back", egress.Open, Snapshot{V4: c4, V6: o6, LookupError: failed}, "", "10.77.0.1", "fd4c:7600::1", AliasFromLiveChain, "IPv4 10.77.0.1"},
		{"open chain, lookup failed", egress.Closed, Snapshot{V4: o4, V6: o6, LookupError: failed}, "live IPv4 chain is open", "", "", "", ""},
		{"absent chain, lookup failed", egress.Open, Snapshot{LookupError: failed}, "live IPv4 chain is absent", "", "", "", ""},
		{"closed chain without alias", egress.Closed, Snapshot{V4: egress.FamilyState{ChainExists: true, Chain: []string{"-A LEVER_EGRESS -j DROP"}}, LookupError: failed}, "names no alias", "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := PlanEgress(EgressSpec{Posture: tc.posture, Alias: "host.lever.internal"}, tc.snap)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.AliasV4 != tc.wantV4 || d.AliasV6 != tc.wantV6 || d.AliasSource != tc.wantSrc {
				t.Errorf("alias = %q %q from %s", d.AliasV4, d.AliasV6, d.AliasSource)
			}
			w := strings.Join(d.Warnings, "\n")
			if (tc.wantWarns == "") != (w == "") || !strings.Contains(w, tc.wantWarns) {
				t.Errorf("warnings %q, want %q", w, tc.wantWarns)
			}
		})
	}
}

func TestPlanEgressLimaDNS(t *testing.T) {
	a4 := netip.MustParseAddr("192.168.5.2")
	snap := Snapshot{ResolvedV4: a4, LimaDNSFound: true, LimaDNS: []egress.ProtoPort{{Proto: "udp", Port: 35845}}, LimaDNSAddrs: []netip.Addr{a4}}
	for _, p := range []egress.Posture{egress.Open, egress.Closed} {
		d, err := PlanEgress(EgressSpec{Posture: p, Alias: "host.lima.internal", Lima: true, ReplyPorts: []int{22}}, snap)
		if err != nil {
			t.Fatal(err)
		}
		has := strings.Contains(strings.Join(d.Ruleset.V4, "\n"), "-p udp -m udp --dport 35845 -j ACCEPT")
		if has != (p == egress.Open) {
			t.Errorf("%s posture: resolver DNAT target emitted = %v", p, has)
		}
	}
}

func TestSnapshotParsing(t *testing.T) {
	out := "@@lever-begin filter4\n-P OUTPUT ACCEPT\n@@lever-end filter4 0\n@@lever-begin alias6\n::ffff:10.0.0.1 STREAM h\n@@lever-end alias6 0\n"
	secs, err := parseSections(out, marker)
	if err != nil {
		t.Fatal(err)
	}
	if secs["filter4"].Out != "-P OUTPUT ACCEPT" || secs["filter4"].RC != 0 {
		t.Errorf("filter4 = %+v", secs["filter4"])
	}
	if a := firstAddr(secs["alias6"].Out, egress.V6); a.IsValid() {
		t.Errorf("IPv4-mapped address taken as IPv6 alias: %v", a)
	}
	if _, err := parseSections("@@lever-begin a\n@@lever-end b 0\n", marker); err == nil {
		t.Error("mismatched markers accepted")
	}
}
