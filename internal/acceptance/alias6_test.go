package acceptance

import (
	"strings"
	"testing"
)

// The alias-v6 check, row by row: an alias with no IPv6 address or a non-global one
// passes; a global one passes only when the desired IPv6 chain drops it AND the probe to a
// port that is not allowlisted was dropped. The probe is only asked for when it is global.
func TestAliasV6Check(t *testing.T) {
	cases := []struct {
		name      string
		a6        string // resolved alias
		target    string // Targets.AliasV6 override
		covered   bool
		probe     *Outcome
		egressErr string
		want      Status
		detail    string
		wantProbe string // the probe's address, "" when none is made
	}{
		{"no IPv6 address", "", "", false, nil, "", Pass, "resolves to no IPv6 address", ""},
		{"unique-local", "fd6c:6576:6572:1::1", "", false, nil, "", Pass, "is not a global-scope address", ""},
		{"link-local", "fe80::1", "", false, nil, "", Pass, "is not a global-scope address", ""},
		{"IPv4-mapped is not IPv6", "::ffff:192.168.5.2", "", false, nil, "", Pass, "is not a global-scope address", ""},
		{"global, covered, dropped", "2001:db8::10", "", true, &Outcome{Result: "timeout", ElapsedMS: 1500}, "", Pass, "LEVER_EGRESS covers it", "[2001:db8::10]:9"},
		{"global, connected (attack)", "2001:db8::10", "", true, &Outcome{Result: "connected", ElapsedMS: 0.2}, "", Fail, "not covered by LEVER_EGRESS: [2001:db8::10]:9: connected", "[2001:db8::10]:9"},
		{"global, not in the desired chain", "2001:db8::10", "", false, &Outcome{Result: "timeout"}, "", Fail, "the desired IPv6 chain does not drop it", "[2001:db8::10]:9"},
		{"global, not measured", "2001:db8::10", "", true, nil, "", Fail, "not measured", "[2001:db8::10]:9"},
		{"global, no route (not exercised)", "2001:db8::10", "", true, &Outcome{Result: "netunreach"}, "", Fail, "the firewall was not exercised", "[2001:db8::10]:9"},
		{"target override points at a test namespace", "fd00::1", "2001:db8:1::5", true, &Outcome{Result: "timeout"}, "", Pass, "2001:db8:1::5 is global scope", "[2001:db8:1::5]:9"},
		{"resolution not read", "", "", false, nil, "reading egress state: boom", Fail, "was not read: reading egress state: boom", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, m := good()
			e.AliasV6, e.Targets.AliasV6, e.AliasV6Covered = c.a6, c.target, c.covered
			m.EgressErr = c.egressErr
			if c.probe != nil {
				m.Outcomes["alias6"] = *c.probe
			}
			got := ""
			for _, p := range ProbesFor(e, nil) {
				if p.ID == "alias6" {
					got = p.Addr
				}
			}
			if got != c.wantProbe {
				t.Errorf("alias6 probe address %q, want %q", got, c.wantProbe)
			}
			s, d := statusOf(Evaluate(e, m), "alias-v6")
			if s != c.want || !strings.Contains(d, c.detail) {
				t.Errorf("alias-v6 = %s %q, want %s containing %q", s, d, c.want, c.detail)
			}
		})
	}
	// The probe avoids an allowlisted port.
	e, _ := good()
	e.AliasV6, e.AllowPorts = "2001:db8::10", []int{9, 10}
	if p := closedPort(e); p != 11 {
		t.Errorf("closedPort = %d, want 11", p)
	}
}
