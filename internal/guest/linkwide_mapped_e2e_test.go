//go:build e2e && linux

package guest_test

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/egress"
)

// sendMapped sends payload from ns through a dual-stack IPv6 socket (IPV6_V6ONLY off,
// SO_BROADCAST set) bound to src as an IPv4-mapped address, to dst (IPv4) spelt
// ::ffff:a.b.c.d: the other spelling of an IPv4 destination a program can use.
func sendMapped(ns string, src, dst netip.Addr, port int, payload string) error {
	var sendErr error
	err := inNetns(ns, func() error {
		fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0); err != nil {
			return err
		}
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1); err != nil {
			return err
		}
		// As16 of an IPv4 address is its IPv4-mapped form.
		if err := syscall.Bind(fd, &syscall.SockaddrInet6{Addr: src.As16()}); err != nil {
			return fmt.Errorf("bind ::ffff:%s: %w", src, err)
		}
		sendErr = syscall.Sendto(fd, []byte(payload), 0, &syscall.SockaddrInet6{Port: port, Addr: dst.As16()})
		return nil
	})
	if err != nil {
		return err
	}
	return sendErr
}

// TestLinkWideMappedSpellingDroppedE2E is the link-wide attack spelt as IPv4-mapped IPv6
// (::ffff:224.0.0.1, ::ffff:255.255.255.255, a directed broadcast, class E) from a
// dual-stack socket, with the OPEN posture applied (real iptables, nft and legacy): the
// kernel sends these as IPv4, so the IPv4 chain must judge them, and the service on the
// link receives none. Controls: before the apply each one arrives (the spelling does reach
// the link), and after it ::ffff:<the link's unicast peer> still does.
func TestLinkWideMappedSpellingDroppedE2E(t *testing.T) {
	for _, variant := range []string{"nft", "legacy"} {
		t.Run(variant, func(t *testing.T) {
			j := newJail(t, variant)
			ns := j.b.Namespace()
			hv := j.b.HostVeth()
			g4, g6 := j.b.GuestAddrs()
			sh(t, "ip", "-n", ns, "addr", "add", "198.19.249.2/24", "brd", "+", "dev", j.gveth)
			sh(t, "ip", "-n", j.hostNS, "addr", "add", "198.19.249.1/24", "brd", "+", "dev", hv)
			sh(t, "ip", "-n", j.hostNS, "addr", "add", "240.0.0.10/32", "dev", hv)
			sh(t, "ip", "-n", ns, "route", "add", "240.0.0.0/4", "dev", j.gveth)
			pub4 := netip.MustParseAddr("198.19.249.2")
			sink := newUDPSink(t, j.hostNS, hv, []netip.Addr{
				netip.MustParseAddr("224.0.0.251"), netip.MustParseAddr("239.255.255.250"), netip.MustParseAddr("ff02::fb"),
			})
			type dgram struct {
				name     string
				src, dst netip.Addr
			}
			blocked := []dgram{
				{"mapped limited broadcast", g4, netip.MustParseAddr("255.255.255.255")},
				{"mapped directed broadcast", pub4, netip.MustParseAddr("198.19.249.255")},
				{"mapped all-hosts multicast", g4, netip.MustParseAddr("224.0.0.1")},
				{"mapped mDNS multicast", g4, netip.MustParseAddr("224.0.0.251")},
				{"mapped SSDP multicast", g4, netip.MustParseAddr("239.255.255.250")},
				{"mapped class E", g4, netip.MustParseAddr("240.0.0.10")},
			}
			allowed := dgram{"mapped unicast on the link", pub4, netip.MustParseAddr("198.19.249.1")}
			round := 0
			sendAll := func(tag string) (map[string]string, map[string]error) {
				round++
				payloads, errs := map[string]string{}, map[string]error{}
				for _, d := range append(blocked, allowed) {
					p := fmt.Sprintf("%s %d %s", tag, round, d.name)
					payloads[d.name], errs[d.name] = p, sendMapped(ns, d.src, d.dst, linkwidePort, p)
				}
				s4 := fmt.Sprintf("%s %d sentinel4", tag, round)
				s6 := fmt.Sprintf("%s %d sentinel6", tag, round)
				if err := sendFrom(ns, pub4, netip.AddrPortFrom(netip.MustParseAddr("198.19.249.1"), linkwidePort), "", s4); err != nil {
					t.Fatalf("sentinel4: %v", err)
				}
				if err := sendFrom(ns, g6, netip.AddrPortFrom(netip.MustParseAddr("2001:db8::10"), linkwidePort), "", s6); err != nil {
					t.Fatalf("sentinel6: %v", err)
				}
				seen := sink.until(t, s4, s6)
				for name, p := range payloads {
					if !seen[p] {
						delete(payloads, name)
					}
				}
				return payloads, errs
			}
			got, errs := sendAll("control")
			for _, d := range append(blocked, allowed) {
				if errs[d.name] != nil || got[d.name] == "" {
					t.Errorf("control, no firewall: %s to ::ffff:%s not received (send error %v)", d.name, d.dst, errs[d.name])
				}
			}
			if _, _, err := j.apply(j.spec(egress.Open, 7444)); err != nil {
				t.Fatalf("apply: %v", err)
			}
			got, errs = sendAll("open")
			for _, d := range blocked {
				if got[d.name] != "" {
					t.Errorf("open posture: %s to ::ffff:%s reached the service on the link", d.name, d.dst)
				}
				if !errors.Is(errs[d.name], syscall.EPERM) {
					t.Errorf("open posture: %s to ::ffff:%s: error %v, want EPERM (the OUTPUT DROP)", d.name, d.dst, errs[d.name])
				}
			}
			if errs[allowed.name] != nil || got[allowed.name] == "" {
				t.Errorf("open posture: %s not received (send error %v)", allowed.name, errs[allowed.name])
			}
		})
	}
}
