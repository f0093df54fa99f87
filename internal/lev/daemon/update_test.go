package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lever-jail/lever/internal/lev/update"
)

// TestUpdateRoute: GET /api/update needs the bearer token, serves the releases answer of
// a loopback source, asks the source once however often it is called (the cache), and
// reports a source past the 64 MiB cap as 502 with the cap's message.
func TestUpdateRoute(t *testing.T) {
	var hits atomic.Int32
	src := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/huge" {
			w.Header().Set("Content-Length", fmt.Sprint(64<<20+1))
			w.WriteHeader(200)
			return
		}
		fmt.Fprint(w, `{"tag_name":"v3.1.4","html_url":"https://example.invalid/v3.1.4"}`)
	}))
	defer src.Close()
	const token = "0123456789abcdef0123"
	get := func(s *Server, auth string) (int, string) {
		ts := httptest.NewServer(s.Handler())
		defer ts.Close()
		req, _ := http.NewRequest("GET", ts.URL+"/api/update", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	s := &Server{Token: token, Update: &update.Checker{URL: src.URL + "/latest", Current: "v3.0.0"}}
	if code, _ := get(s, ""); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := get(s, "wrong-token-wrong-token"); code != 401 || hits.Load() != 0 {
		t.Fatalf("bad token: %d, %d hits", code, hits.Load())
	}
	for i := 0; i < 3; i++ {
		code, body := get(s, token)
		var rep update.Report
		if err := json.Unmarshal([]byte(body), &rep); code != 200 || err != nil || rep.Latest != "v3.1.4" || !rep.UpdateAvailable || rep.Current != "v3.0.0" {
			t.Fatalf("call %d: %d %s", i, code, body)
		}
	}
	if hits.Load() != 1 {
		t.Fatalf("the source was asked %d times, want once (cached)", hits.Load())
	}
	s = &Server{Token: token, Update: &update.Checker{URL: src.URL + "/huge", Current: "v3.0.0"}}
	if code, body := get(s, token); code != 502 || !strings.Contains(body, "response body exceeded 64 MiB from 127.0.0.1") {
		t.Fatalf("past the cap: %d %s", code, body)
	}
}
