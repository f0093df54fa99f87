package brokerctl

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// An agent whose certificate lives 4 s keeps working over 6 s of fresh handshakes, because
// Credentials renews it (new key, new serial) before it expires.
func TestCredentialsRenewBeforeExpiry(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) { o.ClientCertTTL, o.RenewBurst = 4*time.Second, 100 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tok, _ := h.srv.Tickets.Issue("w1", ca.RoleWorker, time.Minute)
	certPEM, keyPEM, err := Enrol(ctx, h.url, h.srv.CA.CertPEM, "w1", tok)
	if err != nil {
		t.Fatal(err)
	}
	cr, err := NewCredentials(h.url, h.srv.CA.CertPEM, certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cr.RenewBefore, cr.RetryEvery = 3*time.Second, 200*time.Millisecond
	var renewals atomic.Int32
	cr.OnRenew = func(_, _ []byte, err error) {
		if err == nil {
			renewals.Add(1)
		}
	}
	first := ca.SerialHex(cr.Current().SerialNumber)
	go cr.Run(ctx)
	tc, err := cr.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
	deadline := time.Now().Add(6 * time.Second)
	n := 0
	for time.Now().Before(deadline) {
		code, body, err := get(c, "GET", h.url+"/healthz", "")
		if err != nil || code != 200 {
			t.Fatalf("request %d at %s: %d %s %v", n, time.Now().Format(time.TimeOnly), code, body, err)
		}
		n++
		time.Sleep(100 * time.Millisecond)
	}
	if renewals.Load() < 2 || ca.SerialHex(cr.Current().SerialNumber) == first {
		t.Fatalf("%d renewals; serial still %s", renewals.Load(), first)
	}
	t.Logf("%d handshakes over 6 s with a 4 s certificate, %d renewals", n, renewals.Load())
}
