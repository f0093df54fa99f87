package brokerctl

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestAuditLogInjection: the audit route is the decoded request path, which a client
// without a certificate chooses. A bidi override (U+202E) would reorder the line in a
// terminal, a C1 CSI (U+009B) restyle it, a zero-width space hide a difference; JSON
// escapes only C0. Each row is sent raw over TLS with no certificate; its audit line must
// hold none of those characters, spelled out instead. Controls: the line is there (the
// visible part of the path is recorded), and ordinary non-ASCII letters stay as they are.
func TestAuditLogInjection(t *testing.T) {
	h := newHarness(t, nil, nil)
	send := func(target string) {
		tc := &tls.Config{RootCAs: h.srv.CA.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}}
		c, err := tls.Dial("tcp", h.srv.JailAddr(), tc)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, tc := range []struct {
		name, target, visible string
		bad                   []string
	}{
		{"bidi override", "/%E2%80%AEgpj.exe", "gpj.exe", []string{"\u202e"}},
		{"bidi isolate", "/a%E2%81%A6b%E2%81%A9c", "a", []string{"\u2066", "\u2069"}},
		{"c1 csi", "/x%C2%9B31my", "31my", []string{"\u009b"}},
		{"zero width", "/ad%E2%80%8Bmin", "min", []string{"\u200b"}},
		{"line separator", "/a%E2%80%A8b", "b", []string{"\u2028"}},
		{"invalid utf-8", "/a%FFb", "b", []string{"\xff"}},
		{"control: plain letters", "/caf%C3%A9-%E6%97%A5", "café-日", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			send(tc.target)
			data, err := os.ReadFile(auditPath(h.state))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(last, `"route":`) || !strings.Contains(last, tc.visible) {
				t.Fatalf("request not audited as expected: %q", last)
			}
			for _, b := range tc.bad {
				if strings.Contains(last, b) {
					t.Errorf("audit line holds %q raw: %q", b, last)
				}
			}
			if tc.bad != nil && !strings.Contains(last, `\\u{`) {
				t.Errorf("character not spelled out: %q", last)
			}
		})
	}
}
