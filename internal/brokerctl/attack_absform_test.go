package brokerctl

import (
	"net/http"
	"strings"
	"testing"
)

// TestAbsoluteFormTargets: HTTP/1.1 lets a client send the request target in absolute form
// ("POST https://host/llm/... HTTP/1.1"). The /llm/ dispatch looks at the target as sent,
// so such a request takes the mux's route and the decoded URL; every spelling must still
// reach the upstream only as the clean allowed path or not at all. Control: the clean
// absolute-form target is forwarded as /v1base/v1/messages.
func TestAbsoluteFormTargets(t *testing.T) {
	rec := &recorder{}
	h := newHarness(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		w.Write([]byte("reached"))
	}), nil)
	cert := h.workerCert("w1")
	for _, tc := range []struct {
		target string
		ok     bool
	}{
		{"https://127.0.0.1/llm/v1/messages", true}, // positive control
		{"https://evil.test/llm/v1/messages", true}, // the authority is not where it goes
		{"https://127.0.0.1/llm/%2e%2e/v1base/x", false},
		{"https://127.0.0.1/llm/v1/..%2f..%2fx", false},
		{"https://127.0.0.1/llm/v1%2fmessages", false},
		{"https://127.0.0.1/llm/v1//messages", false},
		{"https://127.0.0.1/llm/./v1/messages", false},
		{"https://127.0.0.1/llm/v1/messages;a=b", false},
		{"https://127.0.0.1/llm/../v1base/v1/messages", false},
		{"https://127.0.0.1/llm/v1/%6dessages", false},
		{"https://127.0.0.1/llm/v1/x/../messages", false},
		{"https://127.0.0.1/LLM/v1/messages", false},
		{"//127.0.0.1/llm/v1/messages", false},
	} {
		t.Run(tc.target, func(t *testing.T) {
			n := len(rec.all())
			code, body := rawRequest(t, h, &cert, "POST", tc.target, "", "{}")
			reqs := rec.all()
			reached := len(reqs) > n
			if tc.ok {
				if code != 200 || !reached || reqs[n].rawPath != "/v1base/v1/messages" {
					t.Fatalf("clean target: %d %q", code, body)
				}
				return
			}
			if reached {
				t.Fatalf("forwarded as %q (status %d)", reqs[n].rawPath, code)
			}
			if code == 200 || strings.Contains(body, "reached") {
				t.Fatalf("status %d %q", code, body)
			}
		})
	}
}
