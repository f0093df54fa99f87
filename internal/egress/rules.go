// Package egress is the pure part of lever's egress firewall: it renders the desired
// LEVER_EGRESS ruleset per address family, the iptables-restore input that commits it,
// parses `iptables -S` listings and compares live chains with the desired ones rule for
// rule. It does no I/O; internal/guest runs what it plans.
//
// It owns the model of the chain (the rule text, its order, what counts as lever's jump)
// and must not run a command, read a file or know which guest it is for: everything it
// decides is a pure function of its inputs, so the goldens in testdata pin it.
package egress

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
)

// Chain is the one chain lever owns in the filter table of each family.
const Chain = "LEVER_EGRESS"

// JumpRule is OUTPUT's jump to the chain exactly as `iptables -S OUTPUT` prints it.
const JumpRule = "-A OUTPUT -j " + Chain

// Family is an address family: iptables (IPv4) or ip6tables (IPv6).
type Family int

const (
	V4 Family = iota
	V6
)

// Families lists both families in commit order: IPv6 first, IPv4 last, so that a failure
// of the first commit changes nothing and a failure of the last leaves IPv6 new, IPv4 old.
var Families = []Family{V6, V4}

func (f Family) String() string {
	if f == V6 {
		return "IPv6"
	}
	return "IPv4"
}

// Posture is the jail-wide egress knob.
type Posture string

const (
	Open   Posture = "open"
	Closed Posture = "closed"
)

// ProtoPort is one of the Lima resolver's DNAT targets (read from the LIMADNS nat chain).
type ProtoPort struct {
	Proto string `json:"proto"` // tcp or udp
	Port  int    `json:"port"`
}

func (p ProtoPort) String() string { return p.Proto + ":" + strconv.Itoa(p.Port) }

// Inputs is everything the ruleset depends on.
type Inputs struct {
	Posture Posture
	// AliasV4 is the host alias's IPv4 address; required.
	AliasV4 netip.Addr
	// AliasV6 is the host alias's IPv6 address; optional (Lima's alias is usually IPv4
	// only). Without it no IPv6 alias rules are emitted.
	AliasV6 netip.Addr
	// Ports are the host loopback ports reachable on the alias (manager.allow_ports).
	Ports []int
	// DNAT are the resolver's DNAT targets on the alias (Lima, open posture only).
	DNAT []ProtoPort
	// ReplyPorts are guest TCP ports whose ESTABLISHED replies to the alias are accepted:
	// Lima's host-to-guest SSH arrives from the alias, so sshd's answers go to it (22).
	ReplyPorts []int
}

// Ruleset is the desired chain per family: each element a full `-A LEVER_EGRESS ...` line
// in the exact form `iptables -S` prints it back.
type Ruleset struct {
	V4 []string `json:"ipv4"`
	V6 []string `json:"ipv6"`
}

// Rules returns the family's rules.
func (r Ruleset) Rules(f Family) []string {
	if f == V6 {
		return r.V6
	}
	return r.V4
}

// Closed reports whether the ruleset carries the closed catch-all DROP in both families.
func (r Ruleset) Closed() bool { return IsClosed(r.V4) && IsClosed(r.V6) }

var (
	privateV4 = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}
	lateV4    = []string{"169.254.0.0/16", "100.64.0.0/10"}
	privateV6 = []string{"fe80::/10", "fc00::/7"}
	// linkWideV4 are the destinations that reach every host on a link rather than one:
	// multicast (224/4) and the reserved 240/4, which holds the limited broadcast
	// 255.255.255.255. They are dropped in both postures, after the private ranges.
	linkWideV4 = []string{"224.0.0.0/4", "240.0.0.0/4"}
	// linkWideV6 is IPv6 multicast (IPv6 has no broadcast). Neighbour discovery, which
	// needs ff02::1 and the solicited-node groups, is accepted earlier by ndRules.
	linkWideV6 = []string{"ff00::/8"}
)

const (
	// metadataV4 is REJECTed (the only REJECT) just before the link-local DROP so that a
	// cloud metadata lookup fails at once instead of timing out.
	metadataV4 = "169.254.169.254/32"

	catchAll = "-A " + Chain + " -j DROP"
	loAccept = "-A " + Chain + " -o lo -j ACCEPT"
	// icmpException lets the REJECT's own answer (from and to the guest's address, over
	// lo, usually a private address) through the private-range DROPs. IPv4 only: IPv6 has
	// no REJECT, so it needs no exception.
	icmpException = "-A " + Chain + " -o lo -p icmp -m icmp --icmp-type 3/10 -m conntrack --ctstate RELATED -j ACCEPT"
	rejectRule    = "-A " + Chain + " -d " + metadataV4 + " -j REJECT --reject-with icmp-host-prohibited"
	// broadcastDrop drops every broadcast address of the guest's own subnets (the kernel's
	// local routing table says which: `ip route show table local type broadcast`), whatever
	// range the link is in: a directed broadcast such as 198.19.249.255 on a public-range
	// link is in no dropped range. iptables-nft commits it as the native
	// `fib daddr type broadcast`, which it lists back in this form.
	broadcastDrop = "-A " + Chain + " -m addrtype --dst-type BROADCAST -j DROP"
)

// ndDests are the destinations IPv6 neighbour discovery really uses, per message type
// (RFC 4861 7.2): a neighbour solicitation goes to the target's solicited-node group
// (resolution, DAD) or, as a reachability probe, to the neighbour's own unicast address;
// an advertisement answers the solicitor's unicast source (no NA goes to ff02::1: that is
// an unsolicited NA or the answer to another node's DAD, which nothing in the jail needs).
// Link-local unicast covers the router (it is known by its link-local address: router
// advertisements come from fe80::/10) and any neighbour soliciting from its link-local
// address. The alias is the one other neighbour the jail talks to: ndRules adds its /128.
// No on-link prefix of the guest's interfaces is opened: the jail talks to no other
// neighbour, and a whole prefix would let ND carry a payload to every address of the link.
var ndDests = [...]struct {
	icmpType string
	dest     string
}{
	{"135", "ff02::1:ff00:0/104"},
	{"135", "fe80::/10"},
	{"136", "fe80::/10"},
}

// ndRules keep IPv6 neighbour discovery working. Unlike ARP, NS/NA are IP packets that
// pass OUTPUT: without these the closed catch-all DROP makes every IPv6 neighbour (the
// alias included) unresolvable, and in both postures the private-range DROPs would drop
// unicast NUD probes and the NA answering the host's solicitation (both go to ULA or
// link-local addresses). The hop limit must be 255 for a receiver to accept them
// (RFC 4861). Each is limited to a destination ND uses (ndDests, and the alias): without
// the limit an NS/NA carrying any payload went to ANY address, through the router and
// off the link, ahead of the closed catch-all (an exfiltration channel for anything with
// CAP_NET_RAW in the guest).
//
// The IPv6 alias gets NS and NA of its own, because where it is on the guest's link (the
// netns substrate: alias and guest share a ULA /64) the host resolves and probes the guest
// from the alias's own address, and the guest's answer goes there: without them the host
// never resolves the guest (guest.TestNDExfilDroppedClosedE2E shows it), and the
// guest's own unicast probes of the alias would be dropped by the alias DROP. An OrbStack v6
// alias is a ULA (fc00::/7, dropped for everything else); where it sits behind the router
// the /128 sends ND only to the host that already holds the allowed ports. Lima's
// user-mode network has no IPv6 alias: link-local only.
func ndRules(alias netip.Addr) []string {
	nd := func(dest, icmpType string) string {
		return "-A " + Chain + " -d " + dest + " -p ipv6-icmp -m icmp6 --icmpv6-type " + icmpType + " -m hl --hl-eq 255 -j ACCEPT"
	}
	var out []string
	for _, d := range ndDests {
		out = append(out, nd(d.dest, d.icmpType))
	}
	if alias.IsValid() {
		for _, t := range []string{"135", "136"} {
			out = append(out, nd(alias.String()+"/128", t))
		}
	}
	return out
}

// Validate checks the inputs and says which one is bad.
func (in Inputs) Validate() error {
	switch in.Posture {
	case Open, Closed:
	default:
		return fmt.Errorf("egress posture %q: must be open or closed", in.Posture)
	}
	if !in.AliasV4.IsValid() || !in.AliasV4.Is4() {
		return fmt.Errorf("host alias IPv4 address %q: not an IPv4 address", in.AliasV4)
	}
	if in.AliasV6.IsValid() && (!in.AliasV6.Is6() || in.AliasV6.Is4In6()) {
		return fmt.Errorf("host alias IPv6 address %q: not an IPv6 address", in.AliasV6)
	}
	// The alias ACCEPTs come before the link-wide DROPs: an alias that is not one host's
	// address would open multicast or broadcast through them.
	for _, al := range []netip.Addr{in.AliasV4, in.AliasV6} {
		if al.IsValid() && !unicastHost(al) {
			return fmt.Errorf("host alias address %s: a multicast, broadcast, reserved or unspecified address, not one host's", al)
		}
	}
	for _, p := range in.Ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("allowed port %d: out of range 1-65535", p)
		}
	}
	for _, p := range in.ReplyPorts {
		if p < 1 || p > 65535 {
			return fmt.Errorf("reply port %d: out of range 1-65535", p)
		}
	}
	for _, d := range in.DNAT {
		if d.Proto != "tcp" && d.Proto != "udp" {
			return fmt.Errorf("resolver DNAT target %s: protocol must be tcp or udp", d)
		}
		if d.Port < 1 || d.Port > 65535 {
			return fmt.Errorf("resolver DNAT target %s: port out of range 1-65535", d)
		}
	}
	return nil
}

// Render produces the desired ruleset per family, in the order docs/egress.md ("The
// ruleset, in order") gives.
func Render(in Inputs) (Ruleset, error) {
	if err := in.Validate(); err != nil {
		return Ruleset{}, err
	}
	return Ruleset{V4: renderFamily(in, V4), V6: renderFamily(in, V6)}, nil
}

func renderFamily(in Inputs, f Family) []string {
	alias, host := in.AliasV4, "/32"
	if f == V6 {
		alias, host = in.AliasV6, "/128"
	}
	rules := make([]string, 0, len(in.Ports)+16)
	add := func(s string) { rules = append(rules, "-A "+Chain+" "+s) }
	if in.Posture == Closed {
		rules = append(rules, loAccept)
	}
	if f == V6 {
		rules = append(rules, ndRules(in.AliasV6)...)
	}
	if alias.IsValid() {
		d := "-d " + alias.String() + host
		for _, p := range uniqSorted(in.Ports) {
			add(d + " -p tcp -m tcp --dport " + strconv.Itoa(p) + " -j ACCEPT")
		}
		// The resolver lives behind the IPv4 alias only (LIMADNS is an IPv4 nat chain),
		// and is never opened in the closed posture.
		if in.Posture == Open && f == V4 {
			for _, t := range uniqDNAT(in.DNAT) {
				add(d + " -p " + t.Proto + " -m " + t.Proto + " --dport " + strconv.Itoa(t.Port) + " -j ACCEPT")
			}
		}
		for _, p := range uniqSorted(in.ReplyPorts) {
			add(d + " -p tcp -m tcp --sport " + strconv.Itoa(p) + " -m conntrack --ctstate ESTABLISHED -j ACCEPT")
		}
	}
	if f == V4 {
		rules = append(rules, icmpException)
	}
	if alias.IsValid() {
		add("-d " + alias.String() + host + " -j DROP")
	}
	if f == V4 {
		for _, n := range privateV4 {
			add("-d " + n + " -j DROP")
		}
		rules = append(rules, rejectRule)
		for _, n := range lateV4 {
			add("-d " + n + " -j DROP")
		}
		for _, n := range linkWideV4 {
			add("-d " + n + " -j DROP")
		}
		rules = append(rules, broadcastDrop)
	} else {
		for _, n := range privateV6 {
			add("-d " + n + " -j DROP")
		}
		for _, n := range linkWideV6 {
			add("-d " + n + " -j DROP")
		}
	}
	if in.Posture == Closed {
		rules = append(rules, catchAll)
	}
	return rules
}

// unicastHost reports whether a is one host's address: not unspecified, multicast or in
// 240/4 (reserved, with the limited broadcast).
func unicastHost(a netip.Addr) bool {
	if a.IsUnspecified() || a.IsMulticast() {
		return false
	}
	return !a.Is4() || a.As4()[0] < 240
}

func uniqSorted(ps []int) []int {
	out := append([]int(nil), ps...)
	sort.Ints(out)
	w := 0
	for i, p := range out {
		if i == 0 || p != out[w-1] {
			out[w] = p
			w++
		}
	}
	return out[:w]
}

func uniqDNAT(ts []ProtoPort) []ProtoPort {
	out := append([]ProtoPort(nil), ts...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Proto != out[j].Proto {
			return out[i].Proto < out[j].Proto
		}
		return out[i].Port < out[j].Port
	})
	w := 0
	for i, t := range out {
		if i == 0 || t != out[w-1] {
			out[w] = t
			w++
		}
	}
	return out[:w]
}
