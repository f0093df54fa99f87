package brokerctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/cap/ca"
)

// TestEnrolFailuresSpendTicket: a pending ticket lets an enrolment past the per-address
// limit, so broken enrolments with it (a bad CSR, a wrong agent name) count against it
// and the MaxEnrolFailures-th spends it; each refusal says how many remain. Controls: a
// ticket with fewer failures still enrols with a good CSR, and the spent ticket's refusal
// names why it is spent.
func TestEnrolFailuresSpendTicket(t *testing.T) {
	const max = 3
	h := newHarness(t, nil, func(o *Options) { o.MaxEnrolFailures = max })
	c := h.client(nil)
	enrol := func(agent, tok, csr string) (int, string) {
		b, _ := json.Marshal(EnrolRequest{Agent: agent, Ticket: tok, CSR: csr})
		code, body, err := get(c, "POST", h.url+"/enrol", string(b))
		if err != nil {
			t.Fatal(err)
		}
		return code, body
	}
	_, goodCSR, err := ca.NewKeyAndCSR("w1")
	if err != nil {
		t.Fatal(err)
	}
	broken := []struct{ name, agent, csr string }{
		{"broken csr", "w1", "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"},
		{"wrong agent", "w9", string(goodCSR)},
		{"bad name", "../w1", string(goodCSR)},
	}
	for _, b := range broken {
		t.Run(b.name, func(t *testing.T) {
			tok, err := h.srv.Tickets.Issue("w1", ca.RoleWorker, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= max; i++ {
				code, body := enrol(b.agent, tok, b.csr)
				want := fmt.Sprintf("failed enrolment %d of %d", i, max)
				if code < 400 || code >= 500 || !strings.Contains(body, want) {
					t.Fatalf("attempt %d: %d %s, want a refusal counting %q", i, code, body, want)
				}
				if i == max && !strings.Contains(body, "the ticket is now spent") {
					t.Errorf("attempt %d does not say the ticket is spent: %s", i, body)
				}
			}
			code, body := enrol("w1", tok, string(goodCSR))
			if code != http.StatusForbidden || !strings.Contains(body, "spent by repeated failed enrolments") {
				t.Errorf("good enrolment with the spent ticket: %d %s, want 403 naming why", code, body)
			}
		})
	}
	// Control: failures below the limit leave the ticket usable.
	tok, _ := h.srv.Tickets.Issue("w2", ca.RoleWorker, time.Hour)
	for range max - 1 {
		enrol("w2", tok, "garbage")
	}
	_, csr2, _ := ca.NewKeyAndCSR("w2")
	if code, body := enrol("w2", tok, string(csr2)); code != 200 {
		t.Errorf("control: enrolment after %d failures: %d %s", max-1, code, body)
	}
}

// TestAuditLinesThinnedPerSource: every source of repeatable audit lines is thinned per
// identity (or source address) with the left-out lines counted. Rows: a valid certificate
// asking for a route that does not exist; a revoked certificate reconnecting (refused at
// the handshake); cert-less enrolments with a broken CSR on a pending ticket. Each sends
// n requests; its lines stay near the burst, and (first row) lines written plus lines
// counted as left out add up to n exactly. Controls: another identity's requests during
// the flood are all logged, and so are the flooding identity's model requests.
func TestAuditLinesThinnedPerSource(t *testing.T) {
	const n, burst = 150, 10
	type row struct {
		name  string
		flood func(t *testing.T, h *harness)
		// mine picks the flood's lines out of the audit log; total is how many requests
		// or handshakes the flood made (each is a line, written or counted).
		mine  func(r map[string]any) bool
		total int
		// llm: the flooding identity can still make model requests (a control).
		llm bool
	}
	rows := []row{
		{"unknown route, valid certificate", func(t *testing.T, h *harness) {
			c1 := h.workerCert("w1")
			cl := h.client(&c1)
			for range n {
				if code, _, err := get(cl, "GET", h.url+"/nope", ""); err != nil || code != 404 {
					t.Fatalf("flood request: %d %v", code, err)
				}
			}
		}, func(r map[string]any) bool { return r["who"] == "w1" }, n, true},
		{"revoked certificate reconnecting", func(t *testing.T, h *harness) {
			c1 := h.workerCert("w1")
			if code, _, err := get(h.client(&c1), "GET", h.url+"/healthz", ""); err != nil || code != 200 {
				t.Fatalf("control before the revocation: %d %v", code, err)
			}
			if _, err := h.srv.CA.RevokeAgent("w1"); err != nil {
				t.Fatal(err)
			}
			for range n {
				if err := handshakeRefusal(t, h, &c1); err == nil {
					t.Fatal("revoked certificate completed a handshake")
				}
			}
		}, func(r map[string]any) bool {
			// The sweep's line for the control's closed connection is not a request's.
			return r["who"] == "w1" && r["route"] != "connection" || r["route"] == "tls-handshake"
		}, n + 1, false},
		{"enrolments under chosen names, valid certificate", func(t *testing.T, h *harness) {
			// The record's who becomes enrol:<name>; the thinning key stays the certificate's.
			c1 := h.workerCert("w1")
			cl := h.client(&c1)
			for i := range n {
				if code, _, err := get(cl, "POST", h.url+"/enrol", fmt.Sprintf(`{"agent":"a%d","ticket":"x","csr":"x"}`, i)); err != nil || code != 400 {
					t.Fatalf("flood request: %d %v", code, err)
				}
			}
		}, func(r map[string]any) bool {
			return r["who"] == "w1" || strings.HasPrefix(fmt.Sprint(r["who"]), "enrol:a")
		}, n, false},
		{"broken enrolment on a pending ticket", func(t *testing.T, h *harness) {
			tok, _ := h.srv.Tickets.Issue("w1", ca.RoleWorker, time.Hour)
			cl := h.client(nil)
			for range n {
				if _, _, err := get(cl, "POST", h.url+"/enrol", fmt.Sprintf(`{"agent":"w1","ticket":%q,"csr":"broken"}`, tok)); err != nil {
					t.Fatal(err)
				}
			}
		}, func(r map[string]any) bool { return r["route"] == "/enrol" }, n, false},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			h := newHarness(t, nil, func(o *Options) {
				o.AuditRate, o.AuditBurst = 0.001, burst
				o.UnauthRate, o.UnauthBurst = 0.001, burst
				o.LLMRoutes = []string{"GET /v1/models"}
			})
			rw.flood(t, h)
			// Controls: another identity, and the flooder's model requests when it can still
			// make them, are logged in full.
			c2 := h.workerCert("w2")
			cl2 := h.client(&c2)
			for range 5 {
				if code, _, err := get(cl2, "GET", h.url+"/nope", ""); err != nil || code != 404 {
					t.Fatalf("control: %d %v", code, err)
				}
			}
			llm := 0
			if rw.llm {
				c1 := h.workerCert("w1")
				cl := h.client(&c1)
				for range 5 {
					if code, _, err := get(cl, "GET", h.url+"/llm/v1/models", ""); err != nil || code != 200 {
						t.Fatalf("control: model request %d %v", code, err)
					}
				}
				llm = 5
			}
			h.srv.Shutdown(context.Background())
			data, _ := os.ReadFile(auditPath(h.state))
			lines, counted, w2, models := 0, 0, 0, 0
			for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				var r map[string]any
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					t.Fatalf("audit line %q: %v", l, err)
				}
				d, _ := r["detail"].(string)
				if i := strings.Index(d, " similar audit lines left out"); i >= 0 && r["who"] != "w2" {
					var k int
					fmt.Sscan(d[strings.LastIndexAny(d[:i], " ;")+1:i], &k)
					counted += k
				}
				switch {
				case r["who"] == "w2":
					w2++
				case r["route"] == "/llm/v1/models":
					models++
				case r["route"] == "audit-thinning":
					// a summary stands for lines left out; it is not one of them
				case rw.mine(r):
					lines++
				}
			}
			t.Logf("%d flood lines written, %d counted as left out; %d control lines", lines, counted, w2)
			if lines > 3*burst {
				t.Errorf("%d audit lines for %d requests of one source; want them thinned near the burst of %d", lines, n, burst)
			}
			if lines+counted != rw.total {
				t.Errorf("lines written (%d) and counted as left out (%d) add up to %d, want %d", lines, counted, lines+counted, rw.total)
			}
			if w2 != 5 || models != llm {
				t.Errorf("control: another identity's lines %d (want 5), model request lines %d (want %d)", w2, models, llm)
			}
		})
	}
}
