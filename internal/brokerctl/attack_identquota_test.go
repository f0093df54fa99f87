package brokerctl

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/limits"
)

// TestConnectionQuotaPerIdentity: one client identity opens as many connections as the
// broker has slots and keeps them all idle; it keeps at most MaxConnsPerIdentity (its
// oldest idle ones are closed), so another agent still connects and is served. Controls:
// each attacker connection was certified and answered (200), and the attacker's newest
// connection still works: the quota trims, it does not lock the identity out.
func TestConnectionQuotaPerIdentity(t *testing.T) {
	const slots, perWho = 12, 3
	h := newHarness(t, nil, func(o *Options) {
		o.MaxConns, o.MaxConnsPerIdentity = slots, perWho
		o.IdleTimeout = time.Minute
	})
	c1 := h.workerCert("w1")
	var conns []*rawConn
	for i := range slots {
		r, err := dialRaw(t, h, &c1)
		if err != nil {
			t.Fatalf("attacker connection %d: %v", i, err)
		}
		if code, err := r.get("/healthz"); err != nil || code != 200 {
			t.Fatalf("control: attacker connection %d not answered: %d %v", i, code, err)
		}
		conns = append(conns, r)
	}
	open := 0
	for _, r := range conns[:slots-perWho] {
		if !r.closedByPeer(10 * time.Second) {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of the identity's oldest connections still open beyond its quota of %d", open, perWho)
	}
	if code, err := conns[slots-1].get("/healthz"); err != nil || code != 200 {
		t.Errorf("control: the identity's newest connection: %d %v", code, err)
	}
	c2 := h.workerCert("w2")
	cl := clientFor(h.srv.CA.Pool(), &c2, false)
	cl.Timeout = 20 * time.Second
	if code, body, err := get(cl, "GET", h.url+"/healthz", ""); err != nil || code != 200 {
		t.Errorf("another agent while w1 held its connections: %d %s %v", code, body, err)
	}
}

// TestConnectionQuotaPerIdentityAllBusy: when every connection of an identity is serving
// a request, its next handshake is refused with an audit line naming the per-identity
// cap, rather than any of them being cut. Controls: the busy connections are really the
// identity's (the listener counts them, both serving), and another agent is served.
func TestConnectionQuotaPerIdentityAllBusy(t *testing.T) {
	const perWho = 2
	h := newHarness(t, nil, func(o *Options) {
		o.MaxConnsPerIdentity = perWho
		o.BodyTimeout = time.Minute
	})
	c1 := h.workerCert("w1")
	for range perWho {
		r, err := dialRaw(t, h, &c1)
		if err != nil {
			t.Fatal(err)
		}
		// A renewal whose body never completes keeps the connection serving a request.
		fmt.Fprintf(r.c, "POST /renew HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	}
	l := h.srv.jailLn.(*limits.Listener)
	deadline := time.Now().Add(20 * time.Second)
	for {
		busy := l.Busy("w1")
		if busy == perWho {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("control: %d of w1's connections serving a request, want %d", busy, perWho)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := handshakeRefusal(t, h, &c1); err == nil || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("a third connection of w1 while both serve requests: %v, want the handshake refused", err)
	}
	c2 := h.workerCert("w2")
	if code, body, err := get(h.client(&c2), "GET", h.url+"/healthz", ""); err != nil || code != 200 {
		t.Errorf("control: another agent: %d %s %v", code, body, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	h.srv.Shutdown(ctx)
	audit, _ := os.ReadFile(auditPath(h.state))
	if !strings.Contains(string(audit), "client identity w1 already holds 2 connections, all serving requests (the per-identity connection cap)") {
		t.Errorf("audit does not name the cap:\n%s", audit)
	}
}
