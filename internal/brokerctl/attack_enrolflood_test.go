package brokerctl

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// TestEnrolmentThroughUnauthenticatedFlood: the limit on requests without a certificate is
// per source address, and every jail process shares one, so a process without a ticket
// (the workbench) could spend it and keep an agent that holds one from enrolling. During
// such a flood: an enrolment with a pending ticket succeeds; controls: the flood really
// exhausted the limit (its own requests get 429), an enrolment with an unknown ticket and
// a replay of the spent ticket still get 429, and nothing without a ticket gets through.
func TestEnrolmentThroughUnauthenticatedFlood(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) { o.UnauthRate, o.UnauthBurst = 0.001, 4 })
	tok, err := h.srv.Tickets.Issue("w1", ca.RoleWorker, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c := h.client(nil)
	limited := 0
	for range 10 {
		code, _, err := get(c, "GET", h.url+"/healthz", "")
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusTooManyRequests {
			limited++
		}
	}
	if limited < 5 {
		t.Fatalf("control: the flood was limited %d times of 10, want the limit exhausted", limited)
	}
	enrol := func(ticket string) (int, string) {
		code, body, err := get(c, "POST", h.url+"/enrol", fmt.Sprintf(`{"agent":"w1","ticket":%q,"csr":"x"}`, ticket))
		if err != nil {
			t.Fatal(err)
		}
		return code, body
	}
	if code, body := enrol("lvt_" + strings.Repeat("A", 43)); code != http.StatusTooManyRequests {
		t.Errorf("control: unknown ticket during the flood: %d %s, want 429", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	certPEM, keyPEM, err := Enrol(ctx, h.url, h.srv.CA.CertPEM, "w1", tok)
	if err != nil {
		t.Fatalf("enrolment with a pending ticket starved by the flood: %v", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if code, body, err := get(h.client(&pair), "GET", h.url+"/healthz", ""); err != nil || code != 200 {
		t.Errorf("enrolled certificate: %d %s %v", code, body, err)
	}
	if code, body := enrol(tok); code != http.StatusTooManyRequests {
		t.Errorf("control: spent ticket during the flood: %d %s, want 429", code, body)
	}
}
