package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/levtest"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// fakeModel is an OpenAI-compatible upstream that drives a tiny agent: first a
// write_file, then a final text with what the tool said. It answers streaming or not,
// as asked, and requires a client certificate (the broker's /llm/ route stands here).
func fakeModel(t *testing.T, calls *atomic.Int64, auth *atomic.Value) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		auth.Store(r.Header.Get("Authorization"))
		if r.URL.Path != "/llm/v1/chat/completions" || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "wrong route or no client cert", 400)
			return
		}
		var req struct {
			Stream   bool `json:"stream"`
			Messages []struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"messages"`
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil || len(req.Tools) == 0 {
			http.Error(w, "bad request", 400)
			return
		}
		last := req.Messages[len(req.Messages)-1]
		var delta string
		if last.Role == "tool" {
			text, _ := json.Marshal("model saw: " + *last.Content)
			delta = `{"content":` + string(text) + `}`
		} else {
			delta = `{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"write_file","arguments":"{\"path\":\"answer.txt\",\"content\":\"42\"}"}}]}`
		}
		if !req.Stream {
			msg := strings.Replace(delta, `"index":0,`, "", 1)
			fmt.Fprintf(w, `{"choices":[{"message":%s,"finish_reason":"stop"}]}`, msg)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":%s}]}\n\ndata: [DONE]\n\n", delta)
	}
}

// TestRunThroughMTLSBroker: the jail's configuration, all from the environment: the model
// is reached by IP over mTLS with lever's client certificate and no API key anywhere.
func TestRunThroughMTLSBroker(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			dir := t.TempDir()
			srvTLS, files := levtest.MTLS(t, dir, "lev-agent")
			var calls atomic.Int64
			var auth atomic.Value
			up := httptest.NewUnstartedServer(fakeModel(t, &calls, &auth))
			up.TLS = srvTLS
			up.StartTLS()
			defer up.Close()
			t.Setenv("LEV_PROVIDER_BASE_URL", up.URL+"/llm/v1")
			t.Setenv("LEV_TLS_CERT", files.Cert)
			t.Setenv("LEV_TLS_KEY", files.Key)
			t.Setenv("LEV_TLS_CA", files.CA)
			cfg := "[provider]\nmodel = \"gpt-test\"\n"
			if stream {
				cfg += "stream = true\n"
			}
			e := start(t, cfg)
			write(t, filepath.Join(e.levHome, "agents", "a.toml"), "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"write_file\"]\n")
			ctx := context.Background()
			rec, err := e.client.Spawn(ctx, runner.Spec{Agent: "a", Workdir: e.wd})
			if err != nil {
				t.Fatal(err)
			}
			rec, _ = e.client.Wait(ctx, rec.ID, 20*time.Millisecond)
			if rec.Status != runner.StatusCompleted || string(rec.Result) != `"model saw: wrote 2 bytes to answer.txt"` {
				t.Fatalf("%s %s %s", rec.Status, rec.Result, rec.Error)
			}
			if b, _ := os.ReadFile(filepath.Join(e.wd, "answer.txt")); string(b) != "42" {
				t.Fatalf("answer.txt %q", b)
			}
			if calls.Load() != 2 || auth.Load().(string) != "" {
				t.Fatalf("calls %d, Authorization %q", calls.Load(), auth.Load())
			}
		})
	}
}
