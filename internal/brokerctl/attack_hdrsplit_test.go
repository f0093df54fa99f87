package brokerctl

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestKeySplitAcrossResponseHeaders: an upstream answer that carries the key split over
// two values of one header, or between a header's name and its value, reaches the jail
// as bytes on the wire where the two halves stand side by side. Read raw over real mTLS
// (HTTP/1.1, so nothing reassembles the headers); the control row's benign split header
// arrives unchanged.
func TestKeySplitAcrossResponseHeaders(t *testing.T) {
	half := len(testKey) / 2
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("m") {
		case "values":
			w.Header().Add("X-A", testKey[:half])
			w.Header().Add("X-A", testKey[half:])
		case "name-value":
			w.Header()["X-"+testKey[:half]] = []string{testKey[half:]}
		case "control":
			w.Header().Add("X-A", "benign-first")
			w.Header().Add("X-A", "benign-second")
		}
		w.Write([]byte(`{"ok":true}`))
	}), func(o *Options) { o.LLMRoutes = []string{"GET /v1/models"} })
	cert := h.workerCert("w1")
	for _, m := range []string{"control", "values", "name-value"} {
		tc := &tls.Config{RootCAs: h.srv.CA.Pool(), MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}}
		conn, err := tls.Dial("tcp", h.srv.JailAddr(), tc)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /llm/v1/models?m=%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", m)
		raw, _ := io.ReadAll(bufio.NewReader(conn))
		conn.Close()
		// What a client reassembling the halves sees: the header block with separators
		// removed, and the values alone run together.
		head, _, _ := strings.Cut(string(raw), "\r\n\r\n")
		joined := strings.NewReplacer("\r\n", "", ": ", "").Replace(head)
		for _, l := range strings.Split(head, "\r\n") {
			if _, v, ok := strings.Cut(l, ": "); ok {
				joined += "|" + v
			}
		}
		joined += "|" + strings.ReplaceAll(joined[strings.Index(joined, "|"):], "|", "")
		if m == "control" {
			if !strings.Contains(string(raw), "X-A: benign-first\r\nX-A: benign-second\r\n") {
				t.Errorf("control: %q", raw)
			}
			continue
		}
		if !strings.Contains(string(raw), " 200 ") {
			t.Errorf("%s: %q", m, raw)
		}
		if strings.Contains(strings.ToLower(joined), strings.ToLower(testKey)) {
			t.Errorf("%s: the key reaches the jail split across headers:\n%s", m, raw)
		}
	}
}
