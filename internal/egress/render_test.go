package egress

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/render")

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file: %v (run go test -update once to create it)", err)
	}
	if d := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(got, "\n")); d != "" {
		t.Errorf("%s differs (-golden +rendered):\n%s", path, d)
	}
}

func TestRenderGolden(t *testing.T) {
	for _, tc := range renderCases {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Render(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range Families {
				golden(t, filepath.Join("testdata", "render", tc.name+"."+fam(f)+".restore"), ChainRestore(rs.Rules(f)))
			}
			if got, want := rs.Closed(), tc.in.Posture == Closed; got != want {
				t.Errorf("Closed() = %v, want %v", got, want)
			}
		})
	}
}

func fam(f Family) string {
	if f == V6 {
		return "v6"
	}
	return "v4"
}

func TestJumpRestoreGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		exists bool
		copies int
	}{
		{"jump-chain-missing", false, 0},
		{"jump-none", true, 0},
		{"jump-one", true, 1},
		{"jump-three", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, filepath.Join("testdata", "render", tc.name+".restore"), JumpRestore(tc.exists, tc.copies))
		})
	}
}

// TestRenderOrder checks docs/egress.md's rule order independently of the goldens, so that a golden
// regenerated from a wrong renderer cannot pass.
func TestRenderOrder(t *testing.T) {
	rs, err := Render(Inputs{Posture: Closed, AliasV4: a("10.77.0.1"), AliasV6: a("fd4c:7600::1"), Ports: []int{80}, DNAT: []ProtoPort{{"udp", 53}}, ReplyPorts: []int{22}})
	if err != nil {
		t.Fatal(err)
	}
	idx := func(rules []string, sub string) int {
		for i, r := range rules {
			if strings.Contains(r, sub) {
				return i
			}
		}
		return -1
	}
	v4 := rs.V4
	order := []string{"-o lo -j ACCEPT", "--dport 80 -j ACCEPT", "--sport 22", "--icmp-type 3/10", "-d 10.77.0.1/32 -j DROP", "-d 10.0.0.0/8", "-d 172.16.0.0/12", "-d 192.168.0.0/16", "169.254.169.254/32 -j REJECT", "-d 169.254.0.0/16", "-d 100.64.0.0/10", "-d 224.0.0.0/4 -j DROP", "-d 240.0.0.0/4 -j DROP", "--dst-type BROADCAST -j DROP", "LEVER_EGRESS -j DROP"}
	last := -1
	for _, o := range order {
		i := idx(v4, o)
		if i <= last {
			t.Fatalf("IPv4 rule %q at %d, want after %d:\n%s", o, i, last, strings.Join(v4, "\n"))
		}
		last = i
	}
	if i := idx(v4, "--dport 53"); i >= 0 {
		t.Errorf("closed posture emitted the resolver DNAT target: %s", v4[i])
	}
	if n := strings.Count(strings.Join(v4, "\n"), "REJECT"); n != 1 {
		t.Errorf("IPv4 has %d REJECTs, want exactly 1", n)
	}
	v6 := rs.V6
	if idx(v6, "fd4c:7600::1/128 -p tcp -m tcp --dport 80 -j ACCEPT") > idx(v6, "-d fc00::/7 -j DROP") {
		t.Errorf("IPv6 alias ACCEPT after the ULA DROP:\n%s", strings.Join(v6, "\n"))
	}
	if nd := idx(v6, "--icmpv6-type 135"); nd < 0 || nd > idx(v6, "--dport 80") || idx(v6, "--icmpv6-type 136") < nd {
		t.Errorf("IPv6 neighbour discovery not ahead of the alias rules:\n%s", strings.Join(v6, "\n"))
	}
	// Every ND ACCEPT names a destination ND uses: the solicited-node groups, link-local
	// unicast or the alias itself, never any address.
	nds := 0
	for _, r := range v6 {
		if !strings.Contains(r, "--icmpv6-type") {
			continue
		}
		nds++
		okDest := false
		for _, d := range []string{"-d ff02::1:ff00:0/104 ", "-d fe80::/10 ", "-d fd4c:7600::1/128 "} {
			okDest = okDest || strings.HasPrefix(r, "-A LEVER_EGRESS "+d)
		}
		if !okDest || !strings.Contains(r, "-m hl --hl-eq 255 -j ACCEPT") {
			t.Errorf("IPv6 neighbour discovery rule not limited to an ND destination at hop limit 255: %s", r)
		}
	}
	if nds != 5 {
		t.Errorf("IPv6 has %d neighbour discovery rules, want 5 (NS: solicited-node, link-local, alias; NA: link-local, alias):\n%s", nds, strings.Join(v6, "\n"))
	}
	// Neighbour discovery (NS to a solicited-node group ff02::1:ffXX:XXXX) must come before
	// the multicast DROP, which must come before the closed catch-all.
	if mc := idx(v6, "-d ff00::/8 -j DROP"); mc < idx(v6, "--icmpv6-type 136") || mc < idx(v6, "-d fc00::/7 -j DROP") || mc > idx(v6, "LEVER_EGRESS -j DROP") {
		t.Errorf("IPv6 multicast DROP out of place:\n%s", strings.Join(v6, "\n"))
	}
	if idx(v6, "REJECT") >= 0 || idx(v6, "--icmp-type") >= 0 {
		t.Errorf("IPv6 carries a REJECT or ICMP exception:\n%s", strings.Join(v6, "\n"))
	}
}

func TestRenderRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Inputs
		want string
	}{
		{"posture", Inputs{Posture: "half", AliasV4: a("10.0.0.1")}, `egress posture "half"`},
		{"no v4 alias", Inputs{Posture: Open}, "host alias IPv4 address"},
		{"v6 as v4", Inputs{Posture: Open, AliasV4: a("fd00::1")}, "host alias IPv4 address"},
		{"v4 as v6", Inputs{Posture: Open, AliasV4: a("10.0.0.1"), AliasV6: a("10.0.0.2")}, "host alias IPv6 address"},
		{"port 0", Inputs{Posture: Open, AliasV4: a("10.0.0.1"), Ports: []int{0}}, "allowed port 0"},
		{"port 65536", Inputs{Posture: Open, AliasV4: a("10.0.0.1"), Ports: []int{80, 65536}}, "allowed port 65536"},
		{"dnat proto", Inputs{Posture: Open, AliasV4: a("10.0.0.1"), DNAT: []ProtoPort{{"sctp", 53}}}, "resolver DNAT target sctp:53"},
		{"reply port", Inputs{Posture: Open, AliasV4: a("10.0.0.1"), ReplyPorts: []int{-1}}, "reply port -1"},
		// The alias ACCEPTs precede the link-wide DROPs: an alias that is not one host's
		// address would let multicast or broadcast through them.
		{"multicast v4 alias", Inputs{Posture: Open, AliasV4: a("224.0.0.251")}, "host alias address 224.0.0.251: a multicast"},
		{"broadcast v4 alias", Inputs{Posture: Open, AliasV4: a("255.255.255.255")}, "host alias address 255.255.255.255: a multicast"},
		{"reserved v4 alias", Inputs{Posture: Open, AliasV4: a("240.0.0.1")}, "host alias address 240.0.0.1"},
		{"unspecified v4 alias", Inputs{Posture: Open, AliasV4: a("0.0.0.0")}, "host alias address 0.0.0.0"},
		{"multicast v6 alias", Inputs{Posture: Open, AliasV4: a("10.0.0.1"), AliasV6: a("ff02::1")}, "host alias address ff02::1: a multicast"},
		{"unspecified v6 alias", Inputs{Posture: Open, AliasV4: a("10.0.0.1"), AliasV6: a("::")}, "host alias address ::"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
