package brokerctl

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/lever-jail/lever/internal/config"
)

// gatewayRouting are the headers the fake gateway obeys: the first one present names
// where it sends the request, with the credential it was given.
var gatewayRouting = []string{"Helicone-Target-Url", "Helicone-Openai-Api-Base", "X-Api-Base"}

// fakeGateway is an upstream that acts like an LLM gateway: when a routing header names
// another base URL, it passes the request on there, key and all.
func fakeGateway(rec *recorder) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		for _, h := range gatewayRouting {
			if target := r.Header.Get(h); target != "" {
				req, _ := http.NewRequest("POST", target+"/v1/messages", strings.NewReader("{}"))
				req.Header.Set("Authorization", r.Header.Get("Authorization"))
				req.Header.Set("X-Api-Key", r.Header.Get("X-Api-Key"))
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
				break
			}
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
}

// keyCatcher is a server on loopback that records the credentials it is sent: where a
// gateway would send the host's key on the jail's word.
type keyCatcher struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string
}

func newKeyCatcher(t *testing.T) *keyCatcher {
	k := &keyCatcher{}
	k.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.keys = append(k.keys, r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"))
		k.mu.Unlock()
	}))
	t.Cleanup(k.Close)
	return k
}

func (k *keyCatcher) got() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys...)
}

// TestGatewayHeadersNeverReachUpstream (issue 27 item 13): request headers were forwarded
// by a denylist, so a gateway's routing headers (Helicone-Target-Url, ...-Api-Base,
// ...-Fallbacks, X-Portkey-Config) reached an upstream that obeys them and sends the
// host's key wherever they point. Now only an allowlist per API kind goes through, plus
// broker.llm_extra_headers; everything else is dropped and its name (never its value)
// audited. Per kind (bearer: OpenAI-compatible, x-api-key: Anthropic), one request through
// the real broker carries the gateway's headers, unknown ones, the other kind's API
// header, and headers of a configured family that name a route or a credential: none
// arrive, and the catcher the routing headers point at never hears from the gateway.
// Controls: the same routing header sent to the gateway directly makes it hand the key to
// the catcher (so the gateway does obey it); through the broker, the kind's API headers,
// the SDKs' x-stainless-* telemetry, the idempotency key and the configured extras (a name
// and a family) all arrive with their values.
func TestGatewayHeadersNeverReachUpstream(t *testing.T) {
	for _, tc := range []struct {
		auth            string
		allowed, other  map[string]string // the kind's own headers; the other kind's
		credentialShown string            // how the catcher would see the host's key
	}{
		{AuthBearer, map[string]string{"OpenAI-Beta": "assistants=v2"}, map[string]string{"Anthropic-Version": "2023-06-01", "Anthropic-Beta": "x"}, "Bearer " + testKey},
		{AuthXAPIKey, map[string]string{"Anthropic-Version": "2023-06-01", "Anthropic-Beta": "prompt-caching-2024-07-31"}, map[string]string{"OpenAI-Beta": "assistants=v2"}, testKey},
	} {
		t.Run(tc.auth, func(t *testing.T) {
			catcher := newKeyCatcher(t)
			rec := &recorder{}
			h := newHarness(t, fakeGateway(rec), func(o *Options) {
				o.AuthHeader = tc.auth
				o.LLMExtraHeaders = []string{"X-Title", "x-myco-*"}
			})

			// Control: the gateway obeys a routing header sent to it directly.
			roots := x509.NewCertPool()
			roots.AddCert(h.upstream.Certificate())
			direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
			req, _ := http.NewRequest("POST", h.upstream.URL+"/v1base/v1/messages", strings.NewReader("{}"))
			req.Header.Set("Helicone-Target-Url", catcher.URL)
			req.Header.Set("Authorization", "Bearer direct-control")
			resp, err := direct.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := catcher.got(); len(got) != 1 || got[0] != "Bearer direct-control" {
				t.Fatalf("control: the gateway did not pass a directly sent request on to the catcher: %q", got)
			}

			const secretValue = "gw-value-7d1e"
			dropped := map[string]string{
				"Helicone-Target-Url":      catcher.URL,
				"Helicone-Openai-Api-Base": catcher.URL,
				"Helicone-Fallbacks":       `[{"target-url":"` + catcher.URL + `"}]`,
				"X-Api-Base":               catcher.URL,
				"X-Portkey-Config":         `{"targets":[{"custom_host":"` + catcher.URL + `"}]}`,
				"X-Portkey-Provider":       "openai",
				"Helicone-Cache-Enabled":   secretValue, // unknown, with no telling word in its name
				"X-Myco-Target-Url":        catcher.URL, // in the configured family, names a route
				"X-Myco-Api-Key":           secretValue, // in the configured family, names a credential
			}
			for k, v := range tc.other {
				dropped[k] = v
			}
			arrive := map[string]string{
				"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "lev-test/1",
				"Idempotency-Key": "retry-1", "X-Stainless-Lang": "js", "X-Stainless-Retry-Count": "0",
				"X-Title": "my project", "X-Myco-Trace": "t-1",
			}
			for k, v := range tc.allowed {
				arrive[k] = v
			}
			req, _ = http.NewRequest("POST", h.url+"/llm/v1/messages", strings.NewReader(`{"model":"m"}`))
			for k, v := range dropped {
				req.Header.Set(k, v)
			}
			for k, v := range arrive {
				req.Header.Set(k, v)
			}
			cert := h.workerCert("w1")
			resp, err = h.client(&cert).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			all := rec.all()
			if resp.StatusCode != 200 || len(all) != 2 {
				t.Fatalf("status %d, %d upstream requests (want the control's and this one)", resp.StatusCode, len(all))
			}
			got := all[1].hdr
			for k, v := range arrive {
				if got.Get(k) != v {
					t.Errorf("%s: upstream got %q, want %q", k, got.Get(k), v)
				}
			}
			for k := range dropped {
				if v := got.Values(k); len(v) > 0 {
					t.Errorf("%s forwarded upstream: %q", k, v)
				}
			}
			if keys := catcher.got(); len(keys) != 1 {
				t.Errorf("the gateway passed the broker's request on to the catcher with %q", keys[1:])
			}
			for _, k := range catcher.got() {
				if strings.Contains(k, testKey) || k == tc.credentialShown {
					t.Error("the catcher got the host's key")
				}
			}

			// The audit line names every dropped header, and no value.
			h.srv.Shutdown(t.Context())
			f, err := os.Open(auditPath(h.state))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var line Record
			var raw string
			for sc := bufio.NewScanner(f); sc.Scan(); {
				var r Record
				if json.Unmarshal(sc.Bytes(), &r) == nil && r.Route == "/llm/v1/messages" {
					line, raw = r, sc.Text()
				}
			}
			for k := range dropped {
				if !strings.Contains(line.DroppedHeaders, http.CanonicalHeaderKey(k)) {
					t.Errorf("audit dropped_headers %q lacks %s", line.DroppedHeaders, k)
				}
			}
			for k := range arrive {
				if k = http.CanonicalHeaderKey(k); strings.Contains(line.DroppedHeaders, k+",") || strings.HasSuffix(line.DroppedHeaders, k) {
					t.Errorf("audit names %s, which was forwarded, as dropped", k)
				}
			}
			if strings.Contains(raw, secretValue) || strings.Contains(raw, catcher.URL) {
				t.Errorf("audit line holds a header value: %s", raw)
			}
		})
	}
}

// TestExtraHeadersRefusedAtStart: broker.llm_extra_headers reaches the broker's options,
// and an entry the broker would never forward stops the broker from starting, naming it
// (lever.yaml's own check is in internal/config's load tests). Control: valid entries
// start it.
func TestExtraHeadersRefusedAtStart(t *testing.T) {
	cfg := &config.Config{Name: "inst", Backend: "orbstack", Dir: "/etc/lever",
		Broker: config.Broker{LLMAuth: "api-key", APIKeyFile: "k", LLMUpstream: "https://x/v1", JailPort: 1, AdminPort: 2, LLMExtraHeaders: []string{"X-Title"}}}
	o, err := OptionsFromConfig(cfg, func(k string) string { return map[string]string{EnvAliasIP: "10.0.0.1"}[k] })
	if err != nil || strings.Join(o.LLMExtraHeaders, ",") != "X-Title" {
		t.Fatalf("options %v, %v", o.LLMExtraHeaders, err)
	}
	for _, tc := range []struct{ header, want string }{
		{"X-Title", ""},
		{"x-myco-*", ""},
		{"Helicone-Target-Url", `broker: llm_extra_headers: "Helicone-Target-Url" could choose where a gateway sends the request (and the key); it is never forwarded`},
		{"X-Goog-Api-Key", `broker: llm_extra_headers: "X-Goog-Api-Key" names a credential or account; the broker's key is the only one upstream sees; it is never forwarded`},
		{"x-forwarded-*", `broker: llm_extra_headers: "x-forwarded-*" could choose where a gateway sends the request (and the key); it is never forwarded`},
	} {
		o := Options{StateDir: t.TempDir(), Listen: "127.0.0.1:0", SANIPs: o.SANIPs, LLMExtraHeaders: []string{tc.header}}
		err := o.fill()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("%s: %v, want %q", tc.header, err, tc.want)
		}
	}
}

// TestGatewayRoutingQueryRefused: the same routing choice by query parameter
// (?target_url=, ?api_base=, ?fallbacks=) is refused with 400 before anything is sent, as
// a credential parameter is. Control: an ordinary parameter reaches the gateway.
func TestGatewayRoutingQueryRefused(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, fakeGateway(rec), nil)
	cert := h.workerCert("w1")
	c := h.client(&cert)
	for _, tc := range []struct {
		q    string
		want int
	}{
		{"beta=true", 200},
		{"target_url=http://127.0.0.1:1", 400}, {"api_base=http://127.0.0.1:1", 400}, {"Helicone-Target-Url=x", 400},
		{"fallbacks=x", 400}, {"baseURL=x", 400}, {"beta=true&upstream=x", 400}, {"config=x", 400},
	} {
		before := len(rec.all())
		code, body, err := get(c, "POST", h.url+"/llm/v1/messages?"+tc.q, "{}")
		if err != nil {
			t.Fatal(err)
		}
		reached := len(rec.all()) > before
		if code != tc.want || reached != (tc.want == 200) {
			t.Errorf("?%s: %d %s (reached the gateway: %v), want %d", tc.q, code, body, reached, tc.want)
		}
		if tc.want == 400 && !strings.Contains(body, "could choose where a gateway sends the request") {
			t.Errorf("?%s: %s", tc.q, body)
		}
		if tc.want == 200 && rec.all()[len(rec.all())-1].query != tc.q {
			t.Errorf("?%s: the gateway saw %q", tc.q, rec.all()[len(rec.all())-1].query)
		}
	}
}
