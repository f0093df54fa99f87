package brokerctl

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/brokerctl/keymask"
	"github.com/lever-jail/lever/internal/cap/ca"
	"github.com/lever-jail/lever/internal/config"
)

// Item 1 (split): an upstream streaming the key a few characters per event, with pings in
// between, as a model's deltas would. A client joining the deltas must not get the key;
// the same stream with benign text arrives intact.
func TestKeySplitAcrossSSEEvents(t *testing.T) {
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("plain") != "" {
			// The same trick in one JSON body: the key spread over several values.
			k := testKey
			if r.URL.Query().Get("benign") != "" {
				k = "sk-not-the-key-at-all-0123456789"
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"content":[{"type":"text","text":%q},{"type":"text","text":%q}],"id":%q}`, "x "+k[:9], k[9:20], k[20:])
			return
		}
		text := "the answer is " + testKey + " done"
		if r.URL.Query().Get("benign") != "" {
			text = "the answer is sk-not-the-key and sk- again, done"
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < len(text); i += 4 {
			end := min(i+4, len(text))
			fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", text[i:end])
			w.(http.Flusher).Flush()
			if i%12 == 0 {
				fmt.Fprint(w, "event: ping\ndata: {\"type\": \"ping\"}\n\n")
				w.(http.Flusher).Flush()
			}
		}
		fmt.Fprint(w, "event: message_stop\ndata: {}\n\n")
	}), func(o *Options) { o.LLMRoutes = []string{"POST /v1/messages"} })
	cert := h.workerCert("w1")
	join := func(q string) (string, string) {
		resp, err := h.client(&cert).Post(h.url+"/llm/v1/messages"+q, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var joined strings.Builder
		sc := bufio.NewScanner(strings.NewReader(string(raw)))
		for sc.Scan() {
			var ev struct{ Delta struct{ Text string } }
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(d), &ev) == nil {
				joined.WriteString(ev.Delta.Text)
			}
		}
		return joined.String(), string(raw)
	}
	got, raw := join("")
	if strings.Contains(got, testKey) || strings.Contains(got, testKey[keymask.MinHold:]) {
		t.Errorf("joined deltas leak the key: %q", got)
	}
	if !strings.HasPrefix(got, "the answer is ") || !strings.HasSuffix(got, " done") || !strings.Contains(got, "****************") {
		t.Errorf("joined deltas %q (raw %q)", got, raw)
	}
	// Positive control: text that only starts like a key passes unchanged.
	if got, raw := join("?benign=1"); got != "the answer is sk-not-the-key and sk- again, done" {
		t.Errorf("benign deltas changed: %q (raw %q)", got, raw)
	}
	plain := func(q string) string {
		_, body, err := get(h.client(&cert), "POST", h.url+"/llm/v1/messages?plain=1"+q, "{}")
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Content []struct{ Text string }
			ID      string
		}
		if err := json.Unmarshal([]byte(body), &doc); err != nil || len(doc.Content) != 2 {
			t.Fatalf("plain body %q: %v", body, err)
		}
		return doc.Content[0].Text + doc.Content[1].Text + doc.ID
	}
	if got := plain(""); strings.Contains(got, testKey) || strings.Contains(got, testKey[9:]) || !strings.Contains(got, "*****") {
		t.Errorf("joined JSON values leak the key: %q", got)
	}
	if got := plain("&benign=1"); got != "x sk-not-the-key-at-all-0123456789" {
		t.Errorf("benign JSON changed: %q", got)
	}
}

// Item 4: only the model-call routes of the provider kind reach the upstream (exact method
// and path); everything else is 403, audited, and never forwarded. The kind follows the
// auth header (x-api-key: Anthropic, bearer: OpenAI-compatible) unless broker.llm_routes
// lists the routes.
func TestLLMRouteAllowlist(t *testing.T) {
	for _, tc := range []struct {
		name   string
		auth   string
		routes []string
		allow  []string
		refuse []string
	}{
		{"anthropic defaults", AuthXAPIKey, nil,
			[]string{"POST /v1/messages", "POST /v1/messages/count_tokens", "GET /v1/models"},
			[]string{"GET /v1/messages", "POST /v1/files", "GET /v1/files", "POST /v1/messages/batches", "DELETE /v1/models", "POST /v1/organizations/api_keys", "POST /v1/messages/count_tokens/x", "PUT /v1/messages", "POST /v1/models"}},
		{"openai defaults", AuthBearer, nil,
			[]string{"POST /chat/completions", "POST /responses", "GET /models", "POST /v1/chat/completions"},
			[]string{"POST /files", "POST /fine_tuning/jobs", "GET /organization/admin_api_keys", "DELETE /models", "POST /v1/files", "POST /embeddings", "POST /batches"}},
		{"configured", AuthBearer, []string{"POST /v1/embeddings"},
			[]string{"POST /v1/embeddings"},
			[]string{"POST /chat/completions", "GET /models"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec.add(r)
				io.WriteString(w, "{}")
			}), func(o *Options) { o.AuthHeader, o.LLMRoutes = tc.auth, tc.routes })
			cert := h.workerCert("w1")
			c := h.client(&cert)
			for _, rt := range tc.allow {
				m, p, _ := strings.Cut(rt, " ")
				n := len(rec.all())
				code, body, err := get(c, m, h.url+"/llm"+p, "{}")
				if err != nil || code != 200 || len(rec.all()) != n+1 || rec.all()[n].path != "/v1base"+p || rec.all()[n].method != m {
					t.Errorf("%s: %d %s %v", rt, code, body, err)
				}
			}
			for _, rt := range tc.refuse {
				m, p, _ := strings.Cut(rt, " ")
				n := len(rec.all())
				code, body, err := get(c, m, h.url+"/llm"+p, "{}")
				if err != nil || code != 403 || !strings.Contains(body, "route_refused") || len(rec.all()) != n {
					t.Errorf("%s: %d %s %v (upstream reached: %v)", rt, code, body, err, len(rec.all()) != n)
				}
			}
			h.srv.Shutdown(context.Background())
			audit, _ := os.ReadFile(auditPath(h.state))
			if !strings.Contains(string(audit), "is not an allowed /llm/ route") {
				t.Error("route refusals not audited")
			}
		})
	}
}

// broker.llm_routes and the workers' llm_auth reach the broker's options.
func TestOptionsCarryRoutesAndSubscriptionWorkers(t *testing.T) {
	cfg := &config.Config{Name: "inst", Backend: "orbstack", Dir: "/etc/lever",
		Workers: []config.Worker{{Name: "a", LLMAuth: "api-key"}, {Name: "b", LLMAuth: "subscription"}},
		Broker:  config.Broker{LLMAuth: "api-key", APIKeyFile: "k", LLMUpstream: "https://x/v1", JailPort: 1, AdminPort: 2, LLMRoutes: []string{"POST /v1/embeddings"}}}
	o, err := OptionsFromConfig(cfg, func(k string) string { return map[string]string{EnvAliasIP: "10.0.0.1"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(o.LLMRoutes) != "[POST /v1/embeddings]" || fmt.Sprint(o.NoLLMAgents) != "[inst-worker-b]" {
		t.Errorf("routes %v, no-llm %v", o.LLMRoutes, o.NoLLMAgents)
	}
	o.StateDir = t.TempDir()
	o.LLMRoutes = []string{"post /x"}
	if err := o.fill(); err == nil || !strings.Contains(err.Error(), `method "post" is not one of GET, POST`) {
		t.Errorf("bad route accepted: %v", err)
	}
}

// Item 6 (roles): the route table. A worker whose llm_auth is subscription may renew and
// check health but not spend the key at /llm/; an api-key worker and the manager may.
func TestRoleTable(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) { o.NoLLMAgents = []string{"w-sub"} })
	mgr := issueClientRole(t, caDir(h.state), "mgr", ca.RoleManager)
	worker := h.workerCert("w-key")
	sub := h.workerCert("w-sub")
	for _, tc := range []struct {
		name          string
		cert          any
		method, route string
		want          int
	}{
		{"manager llm", &mgr, "POST", "/llm/plain", 200},
		{"worker llm", &worker, "POST", "/llm/plain", 200},
		{"subscription worker llm", &sub, "POST", "/llm/plain", 403},
		{"subscription worker healthz", &sub, "GET", "/healthz", 200},
		{"manager unknown route", &mgr, "GET", "/admin", 404},
		{"worker unknown route", &worker, "POST", "/revoke", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := get(h.client(tc.cert.(*tlsCert)), tc.method, h.url+tc.route, "{}")
			if err != nil || code != tc.want {
				t.Errorf("got %d %s %v, want %d", code, body, err, tc.want)
			}
		})
	}
}

// Item 6 (renew): /renew retires the certificate presented in the same step that issues
// its successor: the old one is refused at once, and cannot renew a second time.
func TestRenewRetiresPresentedCertificate(t *testing.T) {
	h := newHarness(t, nil, nil)
	ctx := context.Background()
	tok, _ := h.srv.Tickets.Issue("w1", ca.RoleWorker, time.Minute)
	certPEM, keyPEM, err := Enrol(ctx, h.url, h.srv.CA.CertPEM, "w1", tok)
	if err != nil {
		t.Fatal(err)
	}
	oldPair := pairOf(t, certPEM, keyPEM)
	// Positive control: the enrolled certificate works before the renewal.
	if code, _, _ := get(h.client(&oldPair), "GET", h.url+"/healthz", ""); code != 200 {
		t.Fatalf("fresh certificate refused: %d", code)
	}
	newCert, newKey, err := Renew(ctx, h.url, h.srv.CA.CertPEM, certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	newPair := pairOf(t, newCert, newKey)
	if code, _, _ := get(h.client(&newPair), "GET", h.url+"/healthz", ""); code != 200 {
		t.Errorf("renewed certificate refused: %d", code)
	}
	// The retired certificate is refused at the handshake now (conncheck.go).
	code, body, err := get(h.client(&oldPair), "GET", h.url+"/healthz", "")
	if !refusedAtHandshake(err) {
		t.Errorf("old certificate after renew: %d %s %v", code, body, err)
	}
	wantRevokedAtHandshake(t, h, &oldPair, "old certificate after renew")
	if _, _, err := Renew(ctx, h.url, h.srv.CA.CertPEM, certPEM, keyPEM); !refusedAtHandshake(err) {
		t.Errorf("second renewal with the retired certificate: %v", err)
	}
	// Two renewals racing with one certificate: exactly one wins.
	results := make(chan error, 2)
	for range 2 {
		go func() {
			_, _, err := Renew(ctx, h.url, h.srv.CA.CertPEM, newCert, newKey)
			results <- err
		}()
	}
	ok := 0
	for range 2 {
		if <-results == nil {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("%d of 2 concurrent renewals with one certificate succeeded, want 1", ok)
	}
}

// Item 6 (renew): an agent cannot renew in a loop: past a small burst, /renew is 429
// (the CA registry would otherwise grow with every renewal).
func TestRenewRateLimited(t *testing.T) {
	h := newHarness(t, nil, func(o *Options) { o.RenewBurst, o.RenewRate = 2, 0.001 })
	ctx := context.Background()
	tok, _ := h.srv.Tickets.Issue("w1", ca.RoleWorker, time.Minute)
	certPEM, keyPEM, err := Enrol(ctx, h.url, h.srv.CA.CertPEM, "w1", tok)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", "", "429"} {
		nc, nk, err := Renew(ctx, h.url, h.srv.CA.CertPEM, certPEM, keyPEM)
		switch {
		case want == "" && err != nil:
			t.Fatalf("renewal %d: %v", i, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "renews too often")):
			t.Fatalf("renewal %d: %v, want %s", i, err, want)
		}
		if err == nil {
			certPEM, keyPEM = nc, nk
		}
	}
	// The certificate in hand still works: a refused renewal retires nothing.
	pair := pairOf(t, certPEM, keyPEM)
	if code, _, _ := get(h.client(&pair), "GET", h.url+"/healthz", ""); code != 200 {
		t.Errorf("certificate after a refused renewal: %d", code)
	}
}
