//go:build e2e && linux

package guest_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lever-jail/lever/internal/egress"
)

// ndMarker starts the payload the test's neighbour discovery messages carry after their
// target address, so the listener tells them from the kernel's own ND.
const ndMarker = "lvt-nd:"

// ndSink is a raw ICMPv6 socket in the link's host-side namespace: it receives a copy of
// every ICMPv6 message the namespace gets (ND included, before the kernel's ND handler
// judges it) and reports the test payloads.
type ndSink struct{ got chan string }

func newNDSink(t *testing.T, ns string) *ndSink {
	t.Helper()
	s := &ndSink{got: make(chan string, 256)}
	var c net.PacketConn
	if err := inNetns(ns, func() (err error) { c, err = net.ListenPacket("ip6:ipv6-icmp", "::"); return }); err != nil {
		t.Fatalf("raw ICMPv6 listener in %s: %v", ns, err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			if i := strings.Index(string(buf[:n]), ndMarker); i >= 0 {
				s.got <- string(buf[i+len(ndMarker) : n])
			}
		}
	}()
	return s
}

// until collects payloads until every sentinel has arrived (generous deadline: the
// sentinels go out through paths the ruleset accepts, on the same veth after the messages
// under test) and returns every payload seen.
func (s *ndSink) until(t *testing.T, sentinels ...string) map[string]bool {
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

// sendND sends, from a raw ICMPv6 socket in ns (what CAP_NET_RAW allows), a neighbour
// solicitation (135) or advertisement (136) for target to dst with the given hop limit,
// carrying payload after the target address, and returns the send's error (EPERM: the
// OUTPUT DROP). The kernel fills in the ICMPv6 checksum.
func sendND(ns string, icmpType byte, dst, target netip.Addr, zone string, hops int, payload string) error {
	var sendErr error
	err := inNetns(ns, func() error {
		c, err := net.ListenPacket("ip6:ipv6-icmp", "::")
		if err != nil {
			return err
		}
		defer c.Close()
		rc, err := c.(*net.IPConn).SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		rc.Control(func(fd uintptr) {
			serr = errors.Join(
				unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, hops),
				unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, hops))
		})
		if serr != nil {
			return serr
		}
		msg := []byte{icmpType, 0, 0, 0, 0, 0, 0, 0}
		if icmpType == 136 {
			msg[4] = 0x40 // solicited
		}
		t16 := target.As16()
		msg = append(append(msg, t16[:]...), []byte(ndMarker+payload)...)
		_, sendErr = c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice(), Zone: zone})
		return nil
	})
	if err != nil {
		return err
	}
	return sendErr
}

// solicitedNode is a's solicited-node multicast group, ff02::1:ffXX:XXXX.
func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	g := netip.MustParseAddr("ff02::1:ff00:0").As16()
	copy(g[13:], b[13:])
	return netip.AddrFrom16(g)
}

// TestNDExfilDroppedClosedE2E attacks the IPv6 neighbour discovery exception of the CLOSED
// posture (real iptables, nft and legacy), and of the open one where it bypassed the ULA
// and link-local DROPs (there the global address is expected through, as any public one): NS and NA messages with a payload, hop limit 255,
// sent from a raw ICMPv6 socket in the guest to a ULA and a global address on the link, and
// to all-nodes multicast, are refused by the kernel (EPERM, the OUTPUT DROP) and a listener
// on the link receives none of them; so is ND to a link-local address at a hop limit other
// than 255. Positive controls: before the ruleset every one of those messages reaches the
// listener; after it, NS to the solicited-node group and NS/NA to link-local and to the alias
// arrive; with both sides' neighbour caches flushed the guest resolves the alias and
// connects to its allowed port, and the host resolves the guest (its solicitation comes from
// the alias address, so the guest's advertisement goes to the alias /128; only that
// solicited advertisement makes the host's entry REACHABLE).
func TestNDExfilDroppedClosedE2E(t *testing.T) {
	for _, tc := range []struct {
		variant string
		posture egress.Posture
	}{{"nft", egress.Closed}, {"legacy", egress.Closed}, {"nft", egress.Open}, {"legacy", egress.Open}} {
		variant, posture := tc.variant, tc.posture
		t.Run(variant+"/"+string(posture), func(t *testing.T) {
			j := newJail(t, variant)
			ns := j.b.Namespace()
			hv := j.b.HostVeth()
			_, g6 := j.b.GuestAddrs()
			sink := newNDSink(t, j.hostNS)
			ula, global, ll := netip.MustParseAddr("fdff::1"), netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("fe80::77")
			type nd struct {
				name   string
				typ    byte
				dst    netip.Addr
				target netip.Addr
				zone   bool
				hops   int
			}
			blocked := []nd{
				{"NS to a ULA on the link", 135, ula, ula, false, 255},
				{"NA to a ULA on the link", 136, ula, g6, false, 255},
				{"NS to a global address on the link", 135, global, global, false, 255},
				{"NA to a global address on the link", 136, global, g6, false, 255},
				{"NS to all-nodes", 135, netip.MustParseAddr("ff02::1"), ula, true, 255},
				{"NA to the solicited-node group", 136, solicitedNode(ula), g6, true, 255},
				{"NS to link-local at hop limit 64", 135, ll, ll, true, 64},
			}
			allowed := []nd{
				{"NS to the solicited-node group", 135, solicitedNode(ula), ula, true, 255},
				{"NS to link-local", 135, ll, ll, true, 255},
				{"NA to link-local", 136, ll, g6, true, 255},
				{"NS to the alias", 135, j.a6, j.a6, false, 255},
				{"NA to the alias", 136, j.a6, g6, false, 255},
			}
			if posture == egress.Open {
				// The open posture lets unicast to public addresses out, ND included, like
				// any other packet to one; ULA, link-local at the wrong hop limit and
				// multicast stay dropped.
				var still []nd
				for _, m := range blocked {
					if m.dst == global {
						allowed = append(allowed, m)
					} else {
						still = append(still, m)
					}
				}
				blocked = still
			}
			round := 0
			send := func(m nd, tag string) (string, error) {
				zone := ""
				if m.zone {
					zone = j.gveth
				}
				p := fmt.Sprintf("%s %d %s", tag, round, m.name)
				return p, sendND(ns, m.typ, m.dst, m.target, zone, m.hops, p)
			}
			sendAll := func(tag string, ms []nd) (map[string]bool, map[string]error) {
				round++
				payloads, errs := map[string]string{}, map[string]error{}
				for _, m := range ms {
					payloads[m.name], errs[m.name] = send(m, tag)
				}
				// The sentinel last, on the same veth, through a path the ruleset accepts.
				s, err := send(nd{"sentinel", 135, ll, ll, true, 255}, tag)
				if err != nil {
					t.Fatalf("%s: sentinel not sent: %v", tag, err)
				}
				seen := sink.until(t, s)
				got := map[string]bool{}
				for name, p := range payloads {
					got[name] = seen[p]
				}
				return got, errs
			}

			// Control: no firewall yet, every message reaches the listener on the link.
			got, errs := sendAll("control", append(blocked, allowed...))
			for _, m := range append(blocked, allowed...) {
				if errs[m.name] != nil || !got[m.name] {
					t.Errorf("control, no firewall: %s (%s) not received (send error %v)", m.name, m.dst, errs[m.name])
				}
			}

			if _, _, err := j.apply(j.spec(posture, 7444)); err != nil {
				t.Fatalf("apply: %v", err)
			}
			got, errs = sendAll(string(posture), append(blocked, allowed...))
			for _, m := range blocked {
				if got[m.name] {
					t.Errorf("%s posture: %s (%s) reached the listener on the link", posture, m.name, m.dst)
				}
				if !errors.Is(errs[m.name], syscall.EPERM) {
					t.Errorf("%s posture: %s (%s): send error %v, want EPERM (the OUTPUT DROP)", posture, m.name, m.dst, errs[m.name])
				}
			}
			for _, m := range allowed {
				if errs[m.name] != nil || !got[m.name] {
					t.Errorf("%s posture: %s (%s) not received (send error %v); ND must still reach its destinations", posture, m.name, m.dst, errs[m.name])
				}
			}

			// Neighbour discovery still works both ways from flushed caches.
			sh(t, "ip", "-n", ns, "-6", "neigh", "flush", "all")
			sh(t, "ip", "-n", j.hostNS, "-6", "neigh", "flush", "all")
			alias := hp(j.a6, 7444)
			for deadline := time.Now().Add(30 * time.Second); ; {
				out, _, err := dialFrom(ns, alias)
				if err == nil && out == Connected {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s posture: the allowed alias port %s: %s %v after the neighbour caches were flushed", posture, alias, out, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if out := shOut(t, "ip", "-n", ns, "-6", "neigh", "show", j.a6.String()); !strings.Contains(out, "lladdr") {
				t.Errorf("the guest did not resolve the alias %s: %q", j.a6, out)
			}
			// The host resolves the guest: its NS comes from the alias address (the /64's), so
			// the answer goes to the alias /128. A datagram to the guest starts it.
			sh(t, "ip", "-n", j.hostNS, "-6", "neigh", "flush", "all")
			for deadline := time.Now().Add(30 * time.Second); ; {
				if err := sendFrom(j.hostNS, j.a6, netip.AddrPortFrom(g6, linkwidePort), "", "wake"); err != nil {
					t.Fatalf("host to guest datagram: %v", err)
				}
				out := shOut(t, "ip", "-n", j.hostNS, "-6", "neigh", "show", g6.String(), "dev", hv)
				if strings.Contains(out, "REACHABLE") { // only a solicited NA makes it REACHABLE
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the host never resolved the guest %s under the %s posture: %q", g6, posture, out)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
