package egress

import "net/netip"

// renderCases is every posture x alias x port combination the goldens and the captures
// from real iptables cover. Names are file names under testdata/.
var renderCases = []struct {
	name string
	in   Inputs
}{
	{"open-v4-noports", Inputs{Posture: Open, AliasV4: a("10.77.0.1")}},
	{"open-v4-ports", Inputs{Posture: Open, AliasV4: a("10.77.0.1"), Ports: []int{8080, 3000}}},
	{"open-v4v6-noports", Inputs{Posture: Open, AliasV4: a("10.77.0.1"), AliasV6: a("fd4c:7600::1")}},
	{"open-v4v6-ports", Inputs{Posture: Open, AliasV4: a("10.77.0.1"), AliasV6: a("fd4c:7600::1"), Ports: []int{8080, 3000, 8080, 1}}},
	{"closed-v4-noports", Inputs{Posture: Closed, AliasV4: a("10.77.0.1")}},
	{"closed-v4-ports", Inputs{Posture: Closed, AliasV4: a("10.77.0.1"), Ports: []int{7443}}},
	{"closed-v4v6-noports", Inputs{Posture: Closed, AliasV4: a("10.77.0.1"), AliasV6: a("fd4c:7600::1")}},
	{"closed-v4v6-ports", Inputs{Posture: Closed, AliasV4: a("10.77.0.1"), AliasV6: a("fd4c:7600::1"), Ports: []int{65535, 7443, 8080}}},
	// OrbStack's alias is outside the private ranges and its v6 alias is a ULA.
	{"open-orbstack", Inputs{Posture: Open, AliasV4: a("0.250.250.254"), AliasV6: a("fd07:b51a:cc66:0:a617:db5e:ab7:e9f1"), Ports: []int{7443}}},
	// Lima: resolver DNAT targets (open only) and SSH replies to the alias.
	{"open-lima", Inputs{Posture: Open, AliasV4: a("192.168.5.2"), Ports: []int{7443}, DNAT: []ProtoPort{{"udp", 35845}, {"tcp", 35845}}, ReplyPorts: []int{22}}},
	{"closed-lima", Inputs{Posture: Closed, AliasV4: a("192.168.5.2"), Ports: []int{7443}, DNAT: []ProtoPort{{"udp", 35845}, {"tcp", 35845}}, ReplyPorts: []int{22}}},
}

func a(s string) netip.Addr { return netip.MustParseAddr(s) }
