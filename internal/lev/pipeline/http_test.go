package pipeline

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/provider"
)

func TestHTTPTools(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("the other origin was reached")
	}))
	defer other.Close()
	var posted string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			io.WriteString(w, "page body")
		case "/hop":
			http.Redirect(w, r, "/page", http.StatusFound)
		case "/away":
			http.Redirect(w, r, other.URL+"/x", http.StatusFound)
		case "/big":
			chunk := strings.Repeat("z", 1<<20)
			for i := 0; i < 80; i++ {
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
		case "/post":
			b, _ := io.ReadAll(r.Body)
			posted = r.Header.Get("Content-Type") + " " + string(b)
			w.WriteHeader(201)
		}
	}))
	defer srv.Close()
	e := newFenceEnv(t)
	client, _ := provider.NewHTTPClient(provider.TLSFiles{}, 0)
	e.p.HTTP = client
	e.stage.Tools = []string{"web_fetch", "http_get", "http_post"}
	e.p.Perms = &Permissions{Yolo: true}
	cases := []struct {
		name, tool string
		args       map[string]any
		want       string
		isErr      bool
	}{
		{"fetch", "web_fetch", map[string]any{"url": srv.URL + "/page"}, "HTTP 200\npage body", false},
		{"same-origin redirect", "http_get", map[string]any{"url": srv.URL + "/hop"}, "page body", false},
		{"cross-origin redirect", "http_get", map[string]any{"url": srv.URL + "/away"}, "redirect to another origin refused", true},
		{"body over the cap", "http_get", map[string]any{"url": srv.URL + "/big"}, "response body exceeded 64 MiB from 127.0.0.1", true},
		{"post", "http_post", map[string]any{"url": srv.URL + "/post", "body": "a=1", "content_type": "text/plain"}, "HTTP 201", false},
		{"not http", "http_get", map[string]any{"url": "file:///etc/passwd"}, "want an absolute http or https URL", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, res := e.call(tc.tool, tc.args)
			if res.IsError != tc.isErr || !strings.Contains(res.Content, tc.want) {
				t.Fatalf("%v %q", res.IsError, res.Content)
			}
			if !tc.isErr && (len(c.Targets) != 1 || !strings.HasPrefix(c.Targets[0], srv.URL)) {
				t.Fatalf("targets %v", c.Targets)
			}
		})
	}
	if posted != "text/plain a=1" {
		t.Fatalf("posted %q", posted)
	}
}
