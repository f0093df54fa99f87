package egress

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// IsClosed reports whether a chain ends in the closed posture's catch-all DROP.
func IsClosed(chain []string) bool {
	return len(chain) > 0 && chain[len(chain)-1] == catchAll
}

// LiveClosed reports whether the live state is the closed posture: the catch-all DROP in
// BOTH families. A half-applied closed posture is not closed, so it is always rebuilt.
func LiveClosed(v4, v6 FamilyState) bool {
	return v4.ChainExists && v6.ChainExists && IsClosed(v4.Chain) && IsClosed(v6.Chain)
}

// ReadAlias reads the host alias back from a live chain of family f: the single-host
// destination of its ACCEPT and DROP rules (the metadata REJECT is not the alias). It
// returns the zero Addr when the chain names no alias, and an error when it names more
// than one.
func ReadAlias(f Family, chain []string) (netip.Addr, error) {
	seen := map[netip.Addr]bool{}
	for _, r := range chain {
		fs := strings.Fields(r)
		var dst, target string
		for i := 0; i+1 < len(fs); i++ {
			switch fs[i] {
			case "-d":
				dst = fs[i+1]
			case "-j":
				target = fs[i+1]
			}
		}
		if dst == "" || (target != "ACCEPT" && target != "DROP") {
			continue
		}
		p, err := netip.ParsePrefix(dst)
		if err != nil || !p.IsSingleIP() {
			continue
		}
		a := p.Addr()
		if (f == V4) != a.Is4() {
			return netip.Addr{}, fmt.Errorf("%s chain rule %q names an address of the other family", f, r)
		}
		seen[a] = true
	}
	switch len(seen) {
	case 0:
		return netip.Addr{}, nil
	case 1:
		for a := range seen {
			return a, nil
		}
	}
	var names []string
	for a := range seen {
		names = append(names, a.String())
	}
	sort.Strings(names)
	return netip.Addr{}, fmt.Errorf("%s chain names more than one host alias: %s", f, strings.Join(names, ", "))
}

// ParseLimaDNS reads the resolver's DNAT targets from a `iptables -t nat -S LIMADNS`
// listing: each `-j DNAT --to-destination <ip>:<port>` rule gives its protocol and the
// target port. The target address is returned too, so a caller can check it is the alias.
func ParseLimaDNS(listing string) ([]ProtoPort, []netip.Addr, error) {
	t, err := ParseTable(listing)
	if err != nil {
		return nil, nil, fmt.Errorf("LIMADNS nat chain: %w", err)
	}
	var out []ProtoPort
	var addrs []netip.Addr
	for _, r := range t.Rules["LIMADNS"] {
		fs := strings.Fields(r)
		var proto, to string
		dnat := false
		for i := 0; i+1 < len(fs); i++ {
			switch fs[i] {
			case "-p":
				proto = fs[i+1]
			case "-j":
				dnat = fs[i+1] == "DNAT"
			case "--to-destination":
				to = fs[i+1]
			}
		}
		if !dnat {
			continue
		}
		ap, err := netip.ParseAddrPort(to)
		if err != nil || (proto != "tcp" && proto != "udp") {
			return nil, nil, fmt.Errorf("LIMADNS rule %q: want -p tcp|udp and --to-destination <ip>:<port>", r)
		}
		out = append(out, ProtoPort{Proto: proto, Port: int(ap.Port())})
		addrs = append(addrs, ap.Addr())
	}
	return out, addrs, nil
}
