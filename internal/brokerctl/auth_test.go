package brokerctl

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// Every route but /enrol needs a verified, unrevoked client certificate from lever's CA.
func TestClientCertificateRefusals(t *testing.T) {
	h := newHarness(t, nil, nil)
	other, err := ca.LoadOrCreate(filepath.Join(t.TempDir(), "other-ca"))
	if err != nil {
		t.Fatal(err)
	}
	good := h.workerCert("w1")
	expired := issueClient(t, caDir(h.state), "w1", time.Now().Add(-48*time.Hour), time.Hour)
	foreign := issueClient(t, other.Dir(), "w1", time.Now(), time.Hour)
	revoked := h.workerCert("w2")
	if _, err := h.srv.CA.RevokeSerial(ca.SerialHex(revoked.Leaf.SerialNumber)); err != nil {
		t.Fatal(err)
	}
	// A server certificate from lever's own CA lacks the client-auth usage.
	srvCert := *h.srv.Certs.Current()

	for _, route := range []string{"/healthz", "/llm/messages", "/renew"} {
		for _, tc := range []struct {
			name string
			cert *tls.Certificate
			want int // 0: the TLS layer refuses
			msg  string
		}{
			{"valid", &good, 200, ""},
			{"no certificate", nil, 401, "client certificate from lever's CA is required"},
			{"other CA", &foreign, 0, ""},
			{"expired", &expired, 0, ""},
			{"server cert as client", &srvCert, 0, ""},
			// A revoked certificate is refused at the handshake (conncheck.go).
			{"revoked", &revoked, 0, ""},
		} {
			t.Run(route+"/"+tc.name, func(t *testing.T) {
				method, body := "GET", ""
				if route != "/healthz" {
					method, body = "POST", `{"x":1}`
				}
				if route == "/renew" && tc.want == 200 {
					tc.want = 400 // authenticated, but this body is not a CSR
				}
				code, resp, err := get(h.client(tc.cert), method, h.url+route, body)
				if tc.want == 0 {
					if err == nil {
						t.Fatalf("got %d %q, want the handshake refused", code, resp)
					}
					if !strings.Contains(err.Error(), "certificate") && !strings.Contains(err.Error(), "tls") {
						t.Errorf("refused, but not by TLS: %v", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if code != tc.want || !strings.Contains(resp, tc.msg) {
					t.Fatalf("got %d %q, want %d containing %q", code, resp, tc.want, tc.msg)
				}
			})
		}
	}
}

// Refused handshakes leave audit lines too, and the audit names who was refused where.
func TestRefusalsAudited(t *testing.T) {
	h := newHarness(t, nil, nil)
	other, _ := ca.LoadOrCreate(filepath.Join(t.TempDir(), "other-ca"))
	foreign := issueClient(t, other.Dir(), "intruder", time.Now(), time.Hour)
	revoked := h.workerCert("w2")
	h.srv.CA.RevokeSerial(ca.SerialHex(revoked.Leaf.SerialNumber))
	get(h.client(&foreign), "GET", h.url+"/healthz", "")
	get(h.client(&revoked), "GET", h.url+"/llm/x", "")
	get(h.client(nil), "GET", h.url+"/healthz", "")
	h.srv.Shutdown(context.Background())
	data, _ := os.ReadFile(auditPath(h.state))
	var recs []Record
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line is not JSON: %q", line)
		}
		recs = append(recs, r)
	}
	want := map[string]bool{
		"tls-handshake refused unknown authority": false,
		"tls-handshake refused w2 revoked":        false,
		"/healthz refused - 401":                  false,
	}
	for _, r := range recs {
		switch {
		case r.Route == "tls-handshake" && r.Outcome == "refused" && strings.Contains(r.Detail, "unknown authority"):
			want["tls-handshake refused unknown authority"] = true
		case r.Route == "tls-handshake" && r.Outcome == "refused" && strings.Contains(r.Detail, "(w2) is revoked"):
			want["tls-handshake refused w2 revoked"] = true
		case r.Route == "/healthz" && r.Outcome == "refused" && r.Who == "-" && r.Status == 401:
			want["/healthz refused - 401"] = true
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("no audit record %q in:\n%s", k, data)
		}
	}
}

// A client dialing the broker by IP (as agents do under closed egress, with no DNS)
// validates only a server certificate carrying that IP as a SAN.
func TestServerCertificateIPSAN(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
		ips   []net.IP
		ok    bool
	}{
		{"IP SAN present", []string{"host.orb.internal"}, []net.IP{net.ParseIP("127.0.0.1")}, true},
		{"name only", []string{"host.orb.internal"}, nil, false},
		{"other IP", []string{"host.orb.internal"}, []net.IP{net.ParseIP("127.0.0.2")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil, func(o *Options) { o.SANNames, o.SANIPs = tc.names, tc.ips })
			cert := h.workerCert("w1")
			code, _, err := get(h.client(&cert), "GET", h.url+"/healthz", "")
			if tc.ok {
				if err != nil || code != 200 {
					t.Fatalf("got %d, %v", code, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("client accepted a server certificate without IP SAN 127.0.0.1 (status %d)", code)
			}
			if !strings.Contains(err.Error(), "127.0.0.1") {
				t.Errorf("error does not name the IP: %v", err)
			}
		})
	}
}

func TestEnrolment(t *testing.T) {
	h := newHarness(t, nil, nil)
	ctx := context.Background()
	caPEM := h.srv.CA.CertPEM
	mk := func(agent string, ttl time.Duration) string {
		tok, err := h.srv.Tickets.Issue(agent, ca.RoleWorker, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tok := mk("w1", time.Hour)
	certPEM, keyPEM, err := Enrol(ctx, h.url, caPEM, "w1", tok)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := ca.ParseCertPEM(certPEM)
	if leaf.Subject.CommonName != "w1" || ca.Role(leaf) != ca.RoleWorker {
		t.Fatalf("enrolled as %q/%q", leaf.Subject.CommonName, ca.Role(leaf))
	}
	if time.Until(leaf.NotAfter) > ca.DefaultClientTTL+time.Minute {
		t.Errorf("client certificate lives until %s; want short-lived", leaf.NotAfter)
	}
	pair, _ := tls.X509KeyPair(certPEM, keyPEM)
	if code, _, err := get(h.client(&pair), "GET", h.url+"/healthz", ""); err != nil || code != 200 {
		t.Fatalf("enrolled cert on /healthz: %d %v", code, err)
	}

	w2tok := mk("w2", time.Hour)
	expTok := mk("w3", time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	for _, tc := range []struct {
		name, agent, tok, want string
	}{
		{"replayed ticket", "w1", tok, "already been redeemed"},
		{"another worker's ticket", "w1", w2tok, "bound to another agent"},
		{"expired ticket", "w3", expTok, "expired"},
		{"no ticket", "w1", "", "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Enrol(ctx, h.url, caPEM, tc.agent, tc.tok)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "403") {
				t.Fatalf("got %v, want 403 %q", err, tc.want)
			}
		})
	}
	// A bad CSR is refused before the ticket is spent.
	w4 := mk("w4", time.Hour)
	code, _, _ := get(h.client(nil), "POST", h.url+"/enrol", `{"agent":"w4","ticket":"`+w4+`","csr":"junk"}`)
	if code != 400 {
		t.Fatalf("junk CSR: %d, want 400", code)
	}
	if _, _, err := Enrol(ctx, h.url, caPEM, "w4", w4); err != nil {
		t.Fatalf("ticket spent by a refused request: %v", err)
	}
	// The broker itself must be authenticated before a ticket is sent: a client trusting
	// another CA refuses to talk.
	other, _ := ca.LoadOrCreate(filepath.Join(t.TempDir(), "other"))
	w5 := mk("w5", time.Hour)
	if _, _, err := Enrol(ctx, h.url, other.CertPEM, "w5", w5); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("enrolled against an untrusted broker: %v", err)
	}

	// Renewal keeps identity and role, and a revoked agent cannot renew.
	newCert, newKey, err := Renew(ctx, h.url, caPEM, certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	nl, _ := ca.ParseCertPEM(newCert)
	if nl.Subject.CommonName != "w1" || nl.SerialNumber.Cmp(leaf.SerialNumber) == 0 || string(newKey) == string(keyPEM) {
		t.Fatalf("renewal: CN %q serial same=%v key same=%v", nl.Subject.CommonName, nl.SerialNumber.Cmp(leaf.SerialNumber) == 0, string(newKey) == string(keyPEM))
	}
	if _, err := h.srv.CA.RevokeAgent("w1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Renew(ctx, h.url, caPEM, newCert, newKey); !refusedAtHandshake(err) {
		t.Fatalf("revoked agent renewed: %v", err)
	}
	revokedPair := pairOf(t, newCert, newKey)
	wantRevokedAtHandshake(t, h, &revokedPair, "revoked agent")

	// After a broker restart on the same state, the used ticket stays used.
	h.srv.Shutdown(ctx)
	h2 := newHarness(t, nil, func(o *Options) { o.StateDir = h.state })
	if _, _, err := Enrol(ctx, h2.url, caPEM, "w1", tok); err == nil || !strings.Contains(err.Error(), "already been redeemed") {
		t.Fatalf("replay after restart: %v", err)
	}
}

func TestAdminListener(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:7444", true}, {"[::1]:7444", true}, {"localhost:7444", true}, {"127.0.0.2:1", true},
		{"0.0.0.0:7444", false}, {":7444", false}, {"[::]:7444", false}, {"192.168.1.5:7444", false},
		{"host.orb.internal:7444", false}, {"7444", false},
	} {
		err := CheckLoopback(tc.addr)
		if (err == nil) != tc.ok {
			t.Errorf("CheckLoopback(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), tc.addr) {
			t.Errorf("error %q does not name %q", err, tc.addr)
		}
	}
	// New refuses before creating anything.
	dir := t.TempDir()
	_, err := New(Options{StateDir: filepath.Join(dir, "s"), Listen: "127.0.0.1:0", AdminListen: "0.0.0.0:0", SANNames: []string{"x"}})
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("non-loopback admin bind: %v", err)
	}

	h := newHarness(t, nil, nil)
	adminURL := "http://" + h.srv.AdminAddr()
	plain := &http.Client{Transport: &http.Transport{Proxy: nil}}
	if code, _, err := get(plain, "POST", adminURL+"/rotate", "{}"); err != nil || code != 401 {
		t.Fatalf("admin without token: %d %v", code, err)
	}
	if _, err := AdminFor(h.state); err == nil {
		t.Fatal("AdminFor found a broker without a pid file")
	}
	adm := &Admin{Addr: h.srv.AdminAddr(), Token: h.srv.adminToken}
	ctx := context.Background()
	c1, c2 := h.workerCert("w1"), h.workerCert("w1")
	c3 := h.workerCert("w2")
	resp, err := adm.Revoke(ctx, RevokeRequest{Agent: "w1"})
	if err != nil || len(resp.Revoked) != 2 {
		t.Fatalf("revoke by agent: %+v %v", resp, err)
	}
	for _, c := range []tls.Certificate{c1, c2} {
		if code, _, err := get(h.client(&c), "GET", h.url+"/healthz", ""); !refusedAtHandshake(err) {
			t.Errorf("revoked cert got %d %v", code, err)
		}
		wantRevokedAtHandshake(t, h, &c, "revoked cert")
	}
	if code, _, _ := get(h.client(&c3), "GET", h.url+"/healthz", ""); code != 200 {
		t.Errorf("other agent's cert got %d after revoking w1", code)
	}
	if _, err := adm.Revoke(ctx, RevokeRequest{Serial: ca.SerialHex(c3.Leaf.SerialNumber)}); err != nil {
		t.Fatal(err)
	}
	if code, _, err := get(h.client(&c3), "GET", h.url+"/healthz", ""); !refusedAtHandshake(err) {
		t.Errorf("cert revoked by serial got %d %v", code, err)
	}
	wantRevokedAtHandshake(t, h, &c3, "cert revoked by serial")
	if _, err := adm.Revoke(ctx, RevokeRequest{Agent: "nobody"}); err == nil {
		t.Error("revoking an unknown agent succeeded")
	}
	tok, err := adm.Ticket(ctx, "w9", ca.RoleWorker, time.Minute)
	if err != nil || !strings.HasPrefix(tok, "lvt_") {
		t.Fatalf("admin ticket: %q %v", tok, err)
	}
	if _, _, err := Enrol(ctx, h.url, h.srv.CA.CertPEM, "w9", tok); err != nil {
		t.Fatal(err)
	}
}
