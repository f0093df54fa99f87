package brokerctl

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// Item 5: a flood of unauthenticated /enrol requests with huge names costs the audit log
// a bounded amount: names are refused before they are recorded, every field is capped,
// and past the per-IP burst the requests get 429 with one summary line per 10 s.
func TestAuditFloodBounded(t *testing.T) {
	const burst = 8
	h := newHarness(t, nil, func(o *Options) { o.UnauthBurst, o.UnauthRate = burst, 0.001 })
	before := fileSize(t, auditPath(h.state))
	c := h.client(nil)
	counts := map[int]int{}
	var first string
	const n = 60
	for i := range n {
		name := strings.Repeat("a", 15000) // fits the 16 KiB body cap
		if i%2 == 1 {
			name = strings.Repeat("b", 60000) // does not
		}
		code, body, err := get(c, "POST", h.url+"/enrol", fmt.Sprintf(`{"agent":%q,"ticket":"t","csr":"x"}`, name))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = body
		}
		counts[code]++
	}
	// Positive control: the first requests reached the handler and were refused for the name.
	if !strings.Contains(first, "agent name of 15000 bytes is not valid") || len(first) > 400 {
		t.Errorf("first refusal: %.300s", first)
	}
	if counts[400] != burst || counts[429] != n-burst {
		t.Errorf("status counts %v, want %d x 400 then 429", counts, burst)
	}
	// Authenticated clients are not limited.
	cert := h.workerCert("w1")
	if code, _, _ := get(h.client(&cert), "GET", h.url+"/healthz", ""); code != 200 {
		t.Errorf("authenticated request: %d", code)
	}
	grown := fileSize(t, auditPath(h.state)) - before
	bound := int64((burst + 3) * 700)
	if grown > bound {
		t.Errorf("audit log grew %d bytes for %d requests; bound %d", grown, n, bound)
	}
	data, _ := os.ReadFile(auditPath(h.state))
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if len(line) > 2048 {
			t.Errorf("audit line of %d bytes", len(line))
		}
		if strings.Contains(line, "aaaaaaaaaaaaaaaa") || strings.Contains(line, "bbbbbbbbbbbbbbbb") {
			t.Errorf("audit line records the name: %.200s", line)
		}
	}
	if !strings.Contains(string(data), `"status":429`) {
		t.Error("no 429 line audited")
	}
	t.Logf("%d requests (%v) grew the audit log by %d bytes", n, counts, grown)
}

// Item 5: the audit log rotates by size, keeps AuditKeep old files, and never loses the
// line being written: the newest requests are all in the files, in order.
func TestAuditRotation(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) { o.AuditMaxBytes, o.AuditKeep = 4096, 2 })
	cert := h.workerCert("w1")
	c := h.client(&cert)
	const n = 60
	for i := range n {
		get(c, "GET", fmt.Sprintf("%s/nope-%03d", h.url, i), "")
	}
	var routes []string
	for _, p := range []string{auditPath(h.state) + ".2", auditPath(h.state) + ".1", auditPath(h.state)} {
		if sz := fileSize(t, p); sz > 4096 {
			t.Errorf("%s is %d bytes, over the 4096 rotation size", p, sz)
		}
		data, _ := os.ReadFile(p)
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var r Record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: bad line %q", p, line)
			}
			if strings.HasPrefix(r.Route, "/nope-") {
				routes = append(routes, r.Route)
			}
		}
	}
	if _, err := os.Stat(auditPath(h.state) + ".3"); err == nil {
		t.Error("a third old file was kept with AuditKeep 2")
	}
	if len(routes) < 10 || routes[len(routes)-1] != fmt.Sprintf("/nope-%03d", n-1) {
		t.Fatalf("kept routes %v", routes)
	}
	for i := 1; i < len(routes); i++ {
		var a, b int
		fmt.Sscanf(routes[i-1], "/nope-%d", &a)
		fmt.Sscanf(routes[i], "/nope-%d", &b)
		if b != a+1 {
			t.Errorf("line lost between %s and %s", routes[i-1], routes[i])
		}
	}
}

// Item 6: a client that trickles its request body is cut off by the body timeout (408,
// nothing forwarded); a long SSE answer after a complete body, and a slow-but-steady
// stream, are not cut by it.
func TestSlowBodyCutLongStreamKept(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only a request whose body arrived whole counts as reaching the upstream.
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		rec.add(r)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 12 {
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(250 * time.Millisecond)
		}
	}), func(o *Options) {
		o.BodyTimeout, o.IdleTimeout, o.ReadHeaderTimeout = time.Second, time.Second, time.Second
	})
	cert := h.workerCert("w1")
	dial := func() *tls.Conn {
		conn, err := tls.Dial("tcp", h.srv.JailAddr(), &tls.Config{RootCAs: h.srv.CA.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}

	t.Run("trickled body", func(t *testing.T) {
		conn := dial()
		defer conn.Close()
		start := time.Now()
		fmt.Fprintf(conn, "POST /llm/plain HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; i < 100; i++ {
				if _, err := conn.Write([]byte("x")); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("after %s: %v", took, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 408 || took > 4*time.Second || len(rec.all()) != 0 {
			t.Errorf("trickled body: %d %s after %s (upstream reached: %v)", resp.StatusCode, body, took, len(rec.all()) != 0)
		}
	})

	t.Run("slow headers", func(t *testing.T) {
		conn := dial()
		defer conn.Close()
		start := time.Now()
		fmt.Fprintf(conn, "POST /llm/plain HTTP/1.1\r\nHost: x\r\n")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := conn.Read(make([]byte, 1))
		if err == nil || time.Since(start) > 4*time.Second {
			t.Errorf("half-sent headers: %v after %s", err, time.Since(start))
		}
	})

	// Positive control: 3 s of stream after a body that arrived whole, with the body,
	// idle and header timeouts all at 1 s.
	t.Run("long stream", func(t *testing.T) {
		start := time.Now()
		code, body, err := get(h.client(&cert), "POST", h.url+"/llm/stream", `{"stream":true}`)
		if err != nil || code != 200 || strings.Count(body, "data: ") != 12 || time.Since(start) < 2500*time.Millisecond {
			t.Errorf("long stream: %d, %d frames, %v after %s", code, strings.Count(body, "data: "), err, time.Since(start))
		}
	})
}

// Item 6: the jail listener holds at most MaxConns connections; the next waits (no
// handshake) until one closes.
func TestConnectionCap(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) { o.MaxConns = 2 })
	cert := h.workerCert("w1")
	tc := &tls.Config{RootCAs: h.srv.CA.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	var held []*tls.Conn
	for range 2 {
		conn, err := tls.Dial("tcp", h.srv.JailAddr(), tc)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	attempt := func(wait time.Duration) error {
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
	t0 := time.Now()
	if err := attempt(time.Second); err == nil {
		t.Fatal("a third connection was served while two were open")
	} else if time.Since(t0) < 900*time.Millisecond {
		t.Fatalf("third connection failed fast (%v), not by waiting for a slot", err)
	}
	// Positive control: with one connection closed, the next one is served. It may wait
	// for the broker to see the close (and to drop the attempt above, queued before it), so
	// it gets seconds rather than the one above; still well before the default 10 s header
	// timeout would cut held[1], the only other way a slot could come free.
	held[0].Close()
	if err := attempt(5 * time.Second); err != nil {
		t.Errorf("after closing one: %v", err)
	}
	held[1].Close()
}

// TestStalledHandshakesReleaseSlots: connections that take a slot and never finish the
// TLS handshake (nothing sent, or half a ClientHello) are cut after ReadHeaderTimeout,
// which net/http also applies to the handshake, so they cannot hold the cap for ever.
// Control: while they are held, a real client waits for a slot and gets nothing.
// ReadHeaderTimeout is a few seconds so the control, which must end before the stalled
// connections are cut, cannot run into the cut on a loaded machine (at 600 ms it could).
// The stalled connections stay open on the test's side to the end, so only the broker's
// timeout can free their slots: the client after the control, waiting well under the
// broker's other timeouts (minutes), is served only if it does.
func TestStalledHandshakesReleaseSlots(t *testing.T) {
	const stall = 3 * time.Second
	h := newHarness(t, nil, func(o *Options) { o.MaxConns = 2; o.ReadHeaderTimeout = stall })
	cert := h.workerCert("w1")
	tc := &tls.Config{RootCAs: h.srv.CA.Pool(), Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
	var stalled []net.Conn
	for i := range 2 {
		c, err := net.Dial("tcp", h.srv.JailAddr())
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) // a ClientHello record header, then nothing
		}
		stalled = append(stalled, c)
	}
	defer func() {
		for _, c := range stalled {
			c.Close()
		}
	}()
	attempt := func(wait time.Duration) error {
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
	time.Sleep(50 * time.Millisecond) // both stalled connections have been accepted
	if err := attempt(300 * time.Millisecond); err == nil {
		t.Fatal("control: a client was served while two stalled handshakes held the cap of 2")
	}
	// The stalled ones are still open on our side; the broker cuts them at the timeout,
	// and this client, waiting in the listener's queue, is served then.
	if err := attempt(stall + 5*time.Second); err != nil {
		t.Errorf("after the handshake timeout the slots are still held: %v", err)
	}
}
