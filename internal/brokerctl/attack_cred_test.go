package brokerctl

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestCredentialHeadersAndParamsRefused: a jail must not add a credential of its own or
// pick the organisation/project the host's key is spent on, by header (OpenAI-Organization,
// OpenAI-Project, x-goog-api-key, ...) or by query parameter (?key=, ?access_token=). Each
// header row is sent together with the control headers in one request over real mTLS; the
// upstream records what arrived.
func TestCredentialHeadersAndParamsRefused(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		io.WriteString(w, `{"ok":true}`)
	}), func(o *Options) { o.LLMRoutes = []string{"GET /v1/models"} })
	cert := h.workerCert("w1")
	c := h.client(&cert)
	last := func() recorded { a := rec.all(); return a[len(a)-1] }

	t.Run("headers", func(t *testing.T) {
		for _, name := range []string{"OpenAI-Organization", "OpenAI-Project", "X-Goog-Api-Key", "Anthropic-Api-Key", "X-Auth-Token", "X-Session-Token", "Cookie2", "X-Amz-Security-Token", "Ocp-Apim-Subscription-Key", "X-Account-Id", "Anthropic-Workspace"} {
			req, _ := http.NewRequest("GET", h.url+"/llm/v1/models", nil)
			req.Header.Set(name, "jail-chosen")
			// Positive controls: API headers still go through.
			req.Header.Set("OpenAI-Beta", "assistants=v2")
			req.Header.Set("Idempotency-Key", "retry-1")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := last().hdr
			if resp.StatusCode != 200 || got.Get("OpenAI-Beta") != "assistants=v2" || got.Get("Idempotency-Key") != "retry-1" || got.Get("Authorization") != "Bearer "+testKey {
				t.Fatalf("%s: control: status %d, upstream headers %v", name, resp.StatusCode, got)
			}
			if v := got.Values(name); len(v) > 0 {
				t.Errorf("%s forwarded upstream: %v", name, v)
			}
		}
	})

	t.Run("query", func(t *testing.T) {
		for _, tc := range []struct {
			q    string
			want int
		}{
			{"limit=5", 200}, // control: an ordinary parameter reaches the upstream
			{"key=jail", 400}, {"api_key=jail", 400}, {"API-KEY=jail", 400}, {"access_token=jail", 400},
			{"organization=org-x", 400}, {"project=p", 400}, {"limit=5&key=jail", 400},
		} {
			before := len(rec.all())
			code, body, err := get(c, "GET", h.url+"/llm/v1/models?"+tc.q, "")
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("?%s: %d %s, want %d", tc.q, code, body, tc.want)
			}
			reached := len(rec.all()) > before
			if reached != (tc.want == 200) {
				t.Errorf("?%s: reached upstream %v", tc.q, reached)
			}
			if tc.want == 200 && last().query != tc.q {
				t.Errorf("?%s: upstream saw %q", tc.q, last().query)
			}
			if tc.want == 400 && !strings.Contains(body, "names a credential or account") {
				t.Errorf("?%s: %s", tc.q, body)
			}
		}
	})
}
