//go:build e2e && linux

package brokerctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lever-jail/lever/internal/testutil"
)

// inNetns runs fn on an OS thread switched into the named network namespace, so sockets
// fn creates belong to that namespace. The thread is switched back afterwards; if that
// fails it is left locked and dies with the goroutine.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/var/run/netns/" + name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// TestClosedEgressReachability builds the closed posture docs/egress.md describes from real
// parts: a "guest" namespace with no default route whose OUTPUT chain accepts only
// loopback and the broker port on the alias IP and drops everything else (DNS included),
// joined by a veth to a "host" namespace where the broker listens on the alias IP. An
// agent there can only dial the broker by IP, and TLS validates only when the broker's
// certificate carries that IP as a SAN.
func TestClosedEgressReachability(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "ip")
	testutil.RequireTool(t, "iptables")
	var rnd [3]byte
	rand.Read(rnd[:])
	id := hex.EncodeToString(rnd[:])
	hostNS, guestNS := "lvb4h-"+id, "lvb4g-"+id
	hostIf, guestIf := "lvb4h"+id, "lvb4g"+id
	// 198.18.0.0/15 is reserved for benchmarking; a random /30 inside it.
	o3, o4 := int(rnd[0]), int(rnd[1]&0xfc)
	hostIP, guestIP := fmt.Sprintf("198.18.%d.%d", o3, o4+1), fmt.Sprintf("198.18.%d.%d", o3, o4+2)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", guestNS).Run()
		exec.Command("ip", "netns", "del", hostNS).Run()
	})
	run(t, "ip", "netns", "add", hostNS)
	run(t, "ip", "netns", "add", guestNS)
	run(t, "ip", "-n", hostNS, "link", "add", hostIf, "type", "veth", "peer", "name", guestIf, "netns", guestNS)
	run(t, "ip", "-n", hostNS, "addr", "add", hostIP+"/30", "dev", hostIf)
	run(t, "ip", "-n", guestNS, "addr", "add", guestIP+"/30", "dev", guestIf)
	for _, ns := range []struct{ ns, ifc string }{{hostNS, hostIf}, {guestNS, guestIf}} {
		run(t, "ip", "-n", ns.ns, "link", "set", "lo", "up")
		run(t, "ip", "-n", ns.ns, "link", "set", ns.ifc, "up")
	}
	// The closed posture's shape, inside the guest namespace only.
	const port = "7443"
	rules := fmt.Sprintf("*filter\n:LEVER_EGRESS - [0:0]\n-A OUTPUT -j LEVER_EGRESS\n-A LEVER_EGRESS -o lo -j ACCEPT\n-A LEVER_EGRESS -d %s/32 -p tcp -m tcp --dport %s -j ACCEPT\n-A LEVER_EGRESS -j DROP\nCOMMIT\n", hostIP, port)
	cmd := exec.Command("ip", "netns", "exec", guestNS, "iptables-restore", "--noflush")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore in %s: %v\n%s", guestNS, err, out)
	}

	listenInHost := func(network, addr string) (net.Listener, error) {
		var ln net.Listener
		err := inNetns(hostNS, func() (err error) { ln, err = net.Listen(network, addr); return })
		return ln, err
	}
	dialFromGuest := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetns(guestNS, func() (err error) {
			c, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, network, addr)
			return
		})
		return c, err
	}

	for _, tc := range []struct {
		name string
		ips  []net.IP
		ok   bool
	}{
		{"alias IP in the certificate", []net.IP{net.ParseIP(hostIP)}, true},
		{"name only", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, func(o *Options) {
				o.Listen = net.JoinHostPort(hostIP, port)
				o.AdminListen = "127.0.0.1:0" // the host namespace's own loopback
				o.SANNames = []string{"host.lever.internal"}
				o.SANIPs = tc.ips
				o.ListenFunc = listenInHost
			})
			cert := h.workerCert("w1")
			c := h.client(&cert)
			c.Transport.(*http.Transport).DialContext = dialFromGuest
			code, body, err := get(c, "POST", "https://"+net.JoinHostPort(hostIP, port)+"/llm/v1/messages", `{"stream":true}`)
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), hostIP) {
					t.Fatalf("got %d, %v; want TLS to refuse a certificate without IP SAN %s", code, err, hostIP)
				}
				return
			}
			if err != nil || code != 200 || !strings.Contains(body, "message_stop") {
				t.Fatalf("through the closed guest: %d %v %.200s", code, err, body)
			}
			// The same guest cannot reach anything else: another port on the alias is dropped.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if conn, err := dialFromGuest(ctx, "tcp", net.JoinHostPort(hostIP, "7444")); err == nil {
				conn.Close()
				t.Fatal("guest reached a port the closed posture drops")
			}
		})
	}
}
