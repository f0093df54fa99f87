//go:build e2e && linux

package guest_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/egress"
)

// linkwidePort is where the link's stand-in service listens for datagrams.
const linkwidePort = 47001

// udpSink is a UDP service on the link (in the jail's host-side namespace): one socket per
// family on the wildcard address, joined to the multicast groups the test sends to, so
// that it receives broadcast, multicast and unicast datagrams alike.
type udpSink struct {
	got chan string
}

func newUDPSink(t *testing.T, ns, dev string, groups []netip.Addr) *udpSink {
	t.Helper()
	s := &udpSink{got: make(chan string, 256)}
	err := inNetns(ns, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		for _, fam := range []string{"udp4", "udp6"} {
			var c *net.UDPConn
			var err error
			joined := false
			for _, g := range groups {
				if (fam == "udp4") != g.Is4() {
					continue
				}
				if !joined {
					// ListenMulticastUDP binds the wildcard address of the port (SO_REUSEADDR) and
					// joins g on ifi; the further groups are joined on the same socket below.
					c, err = net.ListenMulticastUDP(fam, ifi, &net.UDPAddr{IP: g.AsSlice(), Port: linkwidePort})
					joined = true
				} else {
					err = joinGroup(c, ifi, g)
				}
				if err != nil {
					return fmt.Errorf("joining %s on %s: %w", g, dev, err)
				}
			}
			if c == nil {
				return fmt.Errorf("no group for %s", fam)
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				buf := make([]byte, 512)
				for {
					n, _, err := c.ReadFromUDP(buf)
					if err != nil {
						return
					}
					s.got <- string(buf[:n])
				}
			}()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("UDP service in %s: %v", ns, err)
	}
	return s
}

// joinGroup joins one more multicast group on c (Go's API joins one per socket).
func joinGroup(c *net.UDPConn, ifi *net.Interface, g netip.Addr) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if g.Is4() {
			mreq := &syscall.IPMreqn{Multiaddr: g.As4(), Ifindex: int32(ifi.Index)}
			serr = syscall.SetsockoptIPMreqn(int(fd), syscall.IPPROTO_IP, syscall.IP_ADD_MEMBERSHIP, mreq)
			return
		}
		mreq := &syscall.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(ifi.Index)}
		serr = syscall.SetsockoptIPv6Mreq(int(fd), syscall.IPPROTO_IPV6, syscall.IPV6_JOIN_GROUP, mreq)
	})
	if err != nil {
		return err
	}
	return serr
}

// until collects datagrams until every sentinel has arrived (generous deadline: the
// sentinels go out through open paths, so only a broken link keeps them away) and returns
// every payload seen. Each sentinel follows the datagrams under test of its family on the
// same veth, so a datagram that got through is in the set. (The two families' sockets feed
// one channel, so their sentinels may come in either order.)
func (s *udpSink) until(t *testing.T, sentinels ...string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	deadline := time.After(60 * time.Second)
	for {
		all := true
		for _, x := range sentinels {
			all = all && seen[x]
		}
		if all {
			return seen
		}
		select {
		case p := <-s.got:
			seen[p] = true
		case <-deadline:
			t.Fatalf("the sentinels %q never all arrived (seen %v)", sentinels, seen)
		}
	}
}

// sendFrom sends payload from ns (bound to src, SO_BROADCAST set) to dst and returns the
// send's error: a DROP in OUTPUT makes the kernel refuse the datagram with EPERM.
func sendFrom(ns string, src netip.Addr, dst netip.AddrPort, zone, payload string) error {
	var sendErr error
	err := inNetns(ns, func() error {
		network := "udp4"
		if src.Is6() {
			network = "udp6"
		}
		c, err := net.ListenUDP(network, &net.UDPAddr{IP: src.AsSlice()})
		if err != nil {
			return err
		}
		defer c.Close()
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1) })
		if serr != nil {
			return serr
		}
		_, sendErr = c.WriteToUDP([]byte(payload), &net.UDPAddr{IP: dst.Addr().AsSlice(), Port: int(dst.Port()), Zone: zone})
		return nil
	})
	if err != nil {
		return err
	}
	return sendErr
}

// TestLinkWideDroppedOpenE2E sends UDP from the guest to the link's broadcast, multicast
// and 240/4 addresses with the OPEN posture applied (real iptables, nft and legacy) and
// shows that a service on the link receives none of them and that the kernel refuses
// each send (EPERM: the OUTPUT DROP), while the same service still receives unicast to
// an allowed address. Controls: before the ruleset is applied every one of the same
// datagrams arrives, so each address does reach the service through the link; and IPv6
// neighbour discovery (NS to a solicited-node group, inside ff00::/8) still works after
// the apply with the guest's neighbour cache flushed.
func TestLinkWideDroppedOpenE2E(t *testing.T) {
	for _, variant := range []string{"nft", "legacy"} {
		t.Run(variant, func(t *testing.T) {
			j := newJail(t, variant)
			ns := j.b.Namespace()
			hv := j.b.HostVeth()
			g4, g6 := j.b.GuestAddrs()
			// A link in a range no private-range DROP covers (OrbStack's guest link is
			// 198.19.249.0/24), so that its directed broadcast is judged by the broadcast
			// rule alone; and a class-E address on the host side.
			sh(t, "ip", "-n", ns, "addr", "add", "198.19.249.2/24", "brd", "+", "dev", j.gveth)
			sh(t, "ip", "-n", j.hostNS, "addr", "add", "198.19.249.1/24", "brd", "+", "dev", hv)
			sh(t, "ip", "-n", j.hostNS, "addr", "add", "240.0.0.10/32", "dev", hv)
			sh(t, "ip", "-n", ns, "route", "add", "240.0.0.0/4", "dev", j.gveth)
			pub4 := netip.MustParseAddr("198.19.249.2")
			sink := newUDPSink(t, j.hostNS, hv, []netip.Addr{
				netip.MustParseAddr("224.0.0.251"), netip.MustParseAddr("239.255.255.250"),
				netip.MustParseAddr("ff02::fb"), netip.MustParseAddr("ff05::1:3"),
			})
			type dgram struct {
				name string
				src  netip.Addr
				dst  string
				zone bool // link-scoped IPv6 multicast: sent out the guest's veth
			}
			blocked := []dgram{
				{"limited broadcast", g4, "255.255.255.255", false},
				{"directed broadcast", pub4, "198.19.249.255", false},
				{"all-hosts multicast", g4, "224.0.0.1", false},
				{"mDNS multicast", g4, "224.0.0.251", false},
				{"SSDP multicast", g4, "239.255.255.250", false},
				{"class E", g4, "240.0.0.10", false},
				{"IPv6 all-nodes", g6, "ff02::1", true},
				{"IPv6 mDNS", g6, "ff02::fb", true},
				{"IPv6 site-scope DHCP", g6, "ff05::1:3", true},
			}
			allowed4 := dgram{"unicast on the link", pub4, "198.19.249.1", false}
			allowed6 := dgram{"IPv6 unicast", g6, "2001:db8::10", false}
			round := 0
			send := func(d dgram, tag string) (string, error) {
				zone := ""
				if d.zone {
					zone = j.gveth
				}
				p := fmt.Sprintf("%s %d %s", tag, round, d.name)
				return p, sendFrom(ns, d.src, netip.AddrPortFrom(netip.MustParseAddr(d.dst), linkwidePort), zone, p)
			}
			sendAll := func(tag string) (payloads map[string]string, errs map[string]error) {
				round++
				payloads, errs = map[string]string{}, map[string]error{}
				for _, d := range append(blocked, allowed4, allowed6) {
					payloads[d.name], errs[d.name] = send(d, tag)
				}
				// Sentinels last, one per family, through paths the ruleset leaves open.
				s4, err4 := send(dgram{"sentinel4", pub4, "198.19.249.1", false}, tag)
				s6, err6 := send(dgram{"sentinel6", g6, "2001:db8::10", false}, tag)
				if err4 != nil || err6 != nil {
					t.Fatalf("%s: sentinel not sent: %v %v", tag, err4, err6)
				}
				seen := sink.until(t, s4, s6)
				for name, p := range payloads {
					if !seen[p] {
						delete(payloads, name)
					}
				}
				return payloads, errs
			}

			// Control: no firewall yet, every datagram reaches the service.
			got, errs := sendAll("control")
			for _, d := range append(blocked, allowed4, allowed6) {
				if errs[d.name] != nil || got[d.name] == "" {
					t.Errorf("control, no firewall: %s to %s not received (send error %v)", d.name, d.dst, errs[d.name])
				}
			}

			if _, _, err := j.apply(j.spec(egress.Open, 7444)); err != nil {
				t.Fatalf("apply: %v", err)
			}
			// Neighbour discovery must still work: forget every neighbour first.
			sh(t, "ip", "-n", ns, "neigh", "flush", "all")
			sh(t, "ip", "-n", ns, "-6", "neigh", "flush", "all")
			got, errs = sendAll("open")
			for _, d := range blocked {
				if got[d.name] != "" {
					t.Errorf("open posture: %s to %s reached the service on the link", d.name, d.dst)
				}
				if !errors.Is(errs[d.name], syscall.EPERM) {
					t.Errorf("open posture: sending %s to %s: error %v, want EPERM (the OUTPUT DROP)", d.name, d.dst, errs[d.name])
				}
			}
			for _, d := range []dgram{allowed4, allowed6} {
				if errs[d.name] != nil || got[d.name] == "" {
					t.Errorf("open posture: %s to %s not received (send error %v); the drops must leave unicast alone", d.name, d.dst, errs[d.name])
				}
			}
			if out := strings.TrimSpace(shOut(t, "ip", "-n", ns, "-6", "neigh", "show", "2001:db8::10")); !strings.Contains(out, "lladdr") {
				t.Errorf("IPv6 neighbour discovery did not resolve 2001:db8::10 under the ruleset: %q", out)
			}
		})
	}
}

func shOut(t testing.TB, argv ...string) string {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}
