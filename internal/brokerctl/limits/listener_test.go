package limits

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// TestListenerQuotas: real loopback connections through a Listener of 10 slots, at most
// 2 pending a handshake, 1 unauthenticated, 2 per identity. Each row opens connections,
// moves them through the handshake states, and names which of them the quotas closed
// (the oldest not serving a request, or the newest identity connection when all of its
// others are busy, which Handshook refuses); every other one must still be open.
func TestListenerQuotas(t *testing.T) {
	type op struct {
		kind string // "accept", "anon" (handshake without a certificate), "cert" (as who), "busy"
		i    int    // the connection, by order of accept
		who  string
	}
	for _, tc := range []struct {
		name     string
		ops      []op
		closed   []int
		refused  int // the connection whose Handshook returned false (-1: none)
		busyOfW1 int
	}{
		{"pending quota closes the oldest", []op{{"accept", 0, ""}, {"accept", 1, ""}, {"accept", 2, ""}}, []int{0}, -1, 0},
		{"control: handshakes free the pending quota", []op{{"accept", 0, ""}, {"cert", 0, "w1"}, {"accept", 1, ""}, {"anon", 1, ""}, {"accept", 2, ""}, {"accept", 3, ""}}, nil, -1, 0},
		{"unauthenticated quota closes the oldest", []op{{"accept", 0, ""}, {"anon", 0, ""}, {"accept", 1, ""}, {"anon", 1, ""}}, []int{0}, -1, 0},
		{"identity quota closes its oldest idle one", []op{{"accept", 0, ""}, {"cert", 0, "w1"}, {"accept", 1, ""}, {"cert", 1, "w1"}, {"accept", 2, ""}, {"cert", 2, "w1"}}, []int{0}, -1, 0},
		{"identity quota spares busy ones, refuses the newest", []op{{"accept", 0, ""}, {"cert", 0, "w1"}, {"busy", 0, ""}, {"accept", 1, ""}, {"cert", 1, "w1"}, {"busy", 1, ""}, {"accept", 2, ""}, {"cert", 2, "w1"}}, nil, 2, 2},
		{"control: identities are separate", []op{{"accept", 0, ""}, {"cert", 0, "w1"}, {"accept", 1, ""}, {"cert", 1, "w1"}, {"accept", 2, ""}, {"cert", 2, "w2"}}, nil, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := NewListener(ln, 10, 2, 1, 2)
			defer l.Close()
			var clients []net.Conn
			var conns []*Conn
			refused := -1
			for _, o := range tc.ops {
				switch o.kind {
				case "accept":
					c, err := net.Dial("tcp", ln.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					clients = append(clients, c)
					sc, err := l.Accept()
					if err != nil {
						t.Fatal(err)
					}
					defer sc.Close()
					conns = append(conns, sc.(*Conn))
				case "anon":
					conns[o.i].Handshook(nil)
				case "cert":
					if !conns[o.i].Handshook(&x509.Certificate{Subject: pkix.Name{CommonName: o.who}}) {
						refused = o.i
					}
				case "busy":
					l.ConnState(conns[o.i], http.StateActive)
				}
			}
			if refused != tc.refused {
				t.Errorf("Handshook refused connection %d, want %d", refused, tc.refused)
			}
			if got := l.Busy("w1"); got != tc.busyOfW1 {
				t.Errorf("Busy(w1) = %d, want %d", got, tc.busyOfW1)
			}
			for i, c := range clients {
				want := false
				for _, k := range tc.closed {
					want = want || k == i
				}
				c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				_, err := c.Read(make([]byte, 1))
				gotClosed := errors.Is(err, io.EOF)
				if !gotClosed && !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("connection %d: read %v", i, err)
				}
				if gotClosed != want {
					t.Errorf("connection %d closed: %v, want %v", i, gotClosed, want)
				}
			}
		})
	}
}
