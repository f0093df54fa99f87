package egress

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCompareKinds(t *testing.T) {
	in := Inputs{Posture: Open, AliasV4: a("10.77.0.1"), Ports: []int{1000, 2000}}
	rs, _ := Render(in)
	want := rs.V4
	jump := []string{JumpRule}
	swap := func(s []string, i, j int) []string {
		o := append([]string(nil), s...)
		o[i], o[j] = o[j], o[i]
		return o
	}
	del := func(s []string, i int) []string {
		o := append([]string(nil), s[:i]...)
		return append(o, s[i+1:]...)
	}
	ins := func(s []string, i int, r string) []string {
		o := append([]string(nil), s[:i]...)
		o = append(o, r)
		return append(o, s[i:]...)
	}
	repl := func(s []string, i int, r string) []string {
		o := append([]string(nil), s...)
		o[i] = r
		return o
	}
	x := "-A LEVER_EGRESS -d 203.0.113.9/32 -j ACCEPT"
	for _, tc := range []struct {
		name   string
		chain  []string
		output []string
		want   []string
	}{
		{"match", want, jump, nil},
		{"added", ins(want, 2, x), jump, []string{"IPv4: extra rule at 3: `" + x + "`"}},
		{"removed", del(want, 1), jump, []string{"IPv4: rule 2 missing: `" + want[1] + "`"}},
		{"changed", repl(want, 0, x), jump, []string{"IPv4: rule 1 changed: want `" + want[0] + "`, got `" + x + "`"}},
		{"reordered", swap(want, 0, 1), jump, []string{"IPv4: rule reordered: `" + want[0] + "` wanted at 1, found at 2"}},
		{"moved far", append(del(want, 0), want[0]), jump, []string{"IPv4: rule reordered: `" + want[0] + "` wanted at 1, found at " + fmt.Sprint(len(want))}},
		{"emptied", nil, jump, func() []string {
			var o []string
			for i, r := range want {
				o = append(o, fmt.Sprintf("IPv4: rule %d missing: `%s`", i+1, r))
			}
			return o
		}()},
		{"jump missing", want, []string{"-A OUTPUT -o lo -j ACCEPT"}, []string{"IPv4: jump missing from OUTPUT"}},
		{"jump moved down", want, []string{"-A OUTPUT -o lo -j ACCEPT", JumpRule}, []string{"IPv4: jump not first in OUTPUT; ahead of it: `-A OUTPUT -o lo -j ACCEPT`"}},
		{"jump duplicated", want, []string{JumpRule, "-A OUTPUT -o lo -j ACCEPT", JumpRule}, []string{"IPv4: jump duplicated in OUTPUT (2 copies)"}},
		{"goto is not the jump", want, []string{"-A OUTPUT -g LEVER_EGRESS"}, []string{"IPv4: jump missing from OUTPUT"}},
		{"conditional jump is not the jump", want, []string{"-A OUTPUT -o eth0 -j LEVER_EGRESS", JumpRule}, []string{"IPv4: jump not first in OUTPUT; ahead of it: `-A OUTPUT -o eth0 -j LEVER_EGRESS`"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v6 := FamilyState{ChainExists: true, Chain: rs.V6, Output: jump}
			d := Compare(rs, FamilyState{ChainExists: true, Chain: tc.chain, Output: tc.output}, v6)
			got := d.V4.Lines()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if d.Match() != (tc.want == nil) {
				t.Errorf("Match() = %v with lines %q", d.Match(), got)
			}
		})
	}
}

func TestCompareHalfApplied(t *testing.T) {
	open, _ := Render(Inputs{Posture: Open, AliasV4: a("10.77.0.1"), AliasV6: a("fd4c:7600::1")})
	closed, _ := Render(Inputs{Posture: Closed, AliasV4: a("10.77.0.1"), AliasV6: a("fd4c:7600::1")})
	j := []string{JumpRule}
	// IPv6 committed the closed chain, IPv4 still holds the open one.
	v4 := FamilyState{ChainExists: true, Chain: open.V4, Output: j}
	v6 := FamilyState{ChainExists: true, Chain: closed.V6, Output: j}
	d := Compare(closed, v4, v6)
	if !d.HalfApplied || d.Match() {
		t.Fatalf("half-applied not reported: %+v", d)
	}
	lines := d.Lines()
	if last := lines[len(lines)-1]; last != "half-applied: IPv6 holds the desired chain, IPv4 does not" {
		t.Errorf("last line %q", last)
	}
	if LiveClosed(v4, v6) {
		t.Error("a half-applied closed posture counted as closed")
	}
	if !LiveClosed(FamilyState{ChainExists: true, Chain: closed.V4}, v6) {
		t.Error("closed in both families not detected")
	}
}

func TestReadAliasErrors(t *testing.T) {
	two := []string{"-A LEVER_EGRESS -d 10.0.0.1/32 -p tcp -m tcp --dport 1 -j ACCEPT", "-A LEVER_EGRESS -d 10.0.0.2/32 -j DROP"}
	if _, err := ReadAlias(V4, two); err == nil || !strings.Contains(err.Error(), "10.0.0.1, 10.0.0.2") {
		t.Errorf("two aliases: err = %v", err)
	}
	if _, err := ReadAlias(V6, []string{"-A LEVER_EGRESS -d 10.0.0.1/32 -j DROP"}); err == nil {
		t.Error("IPv4 address in IPv6 chain accepted")
	}
	got, err := ReadAlias(V4, []string{"-A LEVER_EGRESS -d 169.254.169.254/32 -j REJECT --reject-with icmp-host-prohibited", "-A LEVER_EGRESS -j DROP"})
	if err != nil || got.IsValid() {
		t.Errorf("metadata REJECT read as alias: %v %v", got, err)
	}
}

// BenchmarkRenderVerify: rendering (ruleset and both restore inputs) and verification
// (parsing both live listings and comparing rule for rule) for 1 to 1,000 allowlisted
// ports; "drift" is the comparison's worst case, every port rule changed.
func BenchmarkRenderVerify(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		ports := make([]int, n)
		for i := range ports {
			ports[i] = 1024 + i
		}
		in := Inputs{Posture: Closed, AliasV4: a("10.77.0.1"), AliasV6: a("fd4c:7600::1"), Ports: ports}
		rs, _ := Render(in)
		// The live listing as iptables prints it: the whole filter table.
		listing := func(rules []string) string {
			return "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n-N LEVER_EGRESS\n" + JumpRule + "\n" + strings.Join(rules, "\n") + "\n"
		}
		l4, l6 := listing(rs.V4), listing(rs.V6)
		b.Run(fmt.Sprintf("ports=%d/render", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rs, err := Render(in)
				if err != nil {
					b.Fatal(err)
				}
				_ = ChainRestore(rs.V4)
				_ = ChainRestore(rs.V6)
			}
			b.ReportMetric(float64(len(rs.V4)+len(rs.V6)), "rules")
		})
		b.Run(fmt.Sprintf("ports=%d/verify", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v4, _ := ParseFamily(V4, l4)
				v6, _ := ParseFamily(V6, l6)
				if !Compare(rs, v4, v6).Match() {
					b.Fatal("no match")
				}
			}
			b.ReportMetric(float64(len(rs.V4)+len(rs.V6)), "rules")
		})
		b.Run(fmt.Sprintf("ports=%d/drift", n), func(b *testing.B) {
			other := append([]int(nil), ports...)
			for i := range other {
				other[i] += 20000
			}
			rs2, _ := Render(Inputs{Posture: Closed, AliasV4: a("10.77.0.1"), AliasV6: a("fd4c:7600::1"), Ports: other})
			v4, _ := ParseFamily(V4, listing(rs2.V4))
			v6, _ := ParseFamily(V6, listing(rs2.V6))
			b.ReportAllocs()
			for b.Loop() {
				if Compare(rs, v4, v6).Match() {
					b.Fatal("match")
				}
			}
			b.ReportMetric(float64(len(rs.V4)+len(rs.V6)), "rules")
		})
	}
}
