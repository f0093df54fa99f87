package brokerctl

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// TestUnauthenticatedClientCannotHoldTheSlots: every jail process reaches the broker from
// the same address (the alias forwards to host loopback; in a netns jail every container
// shares the guest's), so the workbench, which holds no client certificate, competes with
// lev for the connection cap. Each row has a client without a certificate take every slot
// a different way and hold it (the timeouts are long, as by default, so none rescues the
// agent); then an agent with a certificate must still be served within agentWait, well
// under those 20 s timeouts (and long enough for a loaded machine). Controls: the
// agent is served before the attack, the attacker's first connections are really held
// (still open, and a cert-less request on one is answered), and an enrolment-shaped
// cert-less request still gets its answer.
func TestUnauthenticatedClientCannotHoldTheSlots(t *testing.T) {
	// 8 slots, at most 2 for handshakes in progress and 2 for cert-less connections (the
	// defaults are 512, 64 and 32).
	const slots = 8
	const agentWait = 8 * time.Second
	type row struct {
		name string
		// hold opens one attacker connection and returns it once it holds its slot.
		hold func(h *harness) (net.Conn, error)
	}
	noCert := func(h *harness) *tls.Config {
		return &tls.Config{RootCAs: h.srv.CA.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	}
	rows := []row{
		{"stalled handshakes", func(h *harness) (net.Conn, error) {
			return net.Dial("tcp", h.srv.JailAddr())
		}},
		{"handshake without a certificate, then silence", func(h *harness) (net.Conn, error) {
			return tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", h.srv.JailAddr(), noCert(h))
		}},
		{"one cert-less request, then an idle keep-alive", func(h *harness) (net.Conn, error) {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", h.srv.JailAddr(), noCert(h))
			if err != nil {
				return nil, err
			}
			c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				c.Close()
				return nil, err
			}
			resp.Body.Close()
			c.SetDeadline(time.Time{})
			return c, nil
		}},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			h := newHarness(t, nil, func(o *Options) {
				o.MaxConns = slots
				o.MaxPendingHandshakes, o.MaxUnauthConns = 2, 2
				o.ReadHeaderTimeout = 20 * time.Second
				o.IdleTimeout = 20 * time.Second
			})
			cert := h.workerCert("w1")
			tc := &tls.Config{RootCAs: h.srv.CA.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
			agent := func(wait time.Duration) error {
				conn, err := tls.DialWithDialer(&net.Dialer{Timeout: wait}, "tcp", h.srv.JailAddr(), tc)
				if err != nil {
					return err
				}
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(wait))
				fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}
			if err := agent(agentWait); err != nil {
				t.Fatalf("control: agent not served before the attack: %v", err)
			}
			// The attacker opens twice the cap; connections the broker refuses or closes
			// are simply reopened, as a flood would.
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for range 2 * slots {
				if c, err := rw.hold(h); err == nil {
					held = append(held, c)
				}
			}
			if len(held) == 0 {
				t.Fatal("control: the attacker holds no connection at all")
			}
			time.Sleep(100 * time.Millisecond)
			if err := agent(agentWait); err != nil {
				t.Errorf("agent with a certificate not served while a cert-less client holds connections: %v", err)
			}
			// Enrolment (cert-less by nature) still gets its answer on a fresh connection.
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: agentWait}, "tcp", h.srv.JailAddr(), noCert(h))
			if err != nil {
				t.Fatalf("cert-less client refused outright: %v", err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(agentWait))
			fmt.Fprintf(c, "POST /enrol HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("enrolment-shaped request not answered: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != 400 {
				t.Errorf("enrolment-shaped request: status %d, want 400", resp.StatusCode)
			}
		})
	}
}

// TestInFlightEnrolmentNotEvicted: the quota of cert-less connections closes its oldest
// member when full, but never one serving a request: an enrolment whose body is still
// arriving survives a flood of silent cert-less connections past the quota and gets its
// certificate. Control: the flood's own connections are evicted (a silent one opened
// before the flood is closed by the broker).
func TestInFlightEnrolmentNotEvicted(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) {
		o.MaxConns = 16
		o.MaxPendingHandshakes, o.MaxUnauthConns = 4, 2
		o.ReadHeaderTimeout, o.IdleTimeout = 20*time.Second, 20*time.Second
	})
	tok, err := h.srv.Tickets.Issue("w1", ca.RoleWorker, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, csrPEM, err := ca.NewKeyAndCSR("w1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(EnrolRequest{Agent: "w1", Ticket: tok, CSR: string(csrPEM)})
	noCert := &tls.Config{RootCAs: h.srv.CA.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	silent, err := tls.Dial("tcp", h.srv.JailAddr(), noCert)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	enrol, err := tls.Dial("tcp", h.srv.JailAddr(), noCert)
	if err != nil {
		t.Fatal(err)
	}
	defer enrol.Close()
	enrol.SetDeadline(time.Now().Add(10 * time.Second))
	// Headers and half the body: the request is being served.
	fmt.Fprintf(enrol, "POST /enrol HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	enrol.Write(body[:len(body)/2])
	time.Sleep(100 * time.Millisecond)
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 6 {
		if c, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", h.srv.JailAddr(), noCert); err == nil {
			flood = append(flood, c)
		}
	}
	time.Sleep(100 * time.Millisecond)
	// Control: the silent connection was evicted (the wait is long for a loaded machine; a
	// connection not evicted is still cut only at the 20 s timeouts).
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("control: the silent cert-less connection outlived the flood (read: %v)", err)
	}
	enrol.Write(body[len(body)/2:])
	resp, err := http.ReadResponse(bufio.NewReader(enrol), nil)
	if err != nil {
		t.Fatalf("in-flight enrolment cut by the flood: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "BEGIN CERTIFICATE") {
		t.Errorf("enrolment: %d %s", resp.StatusCode, capText(string(b), 200))
	}
}
