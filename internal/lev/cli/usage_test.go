package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lever-jail/lever/internal/lev/provider"
)

// TestRunUsageRecorded: a run's token usage, as its provider's upstream reported it turn by
// turn, is summed in run.json and served by `lev ps --json`. The upstream is a loopback
// server speaking the Anthropic Messages API (a tool call with usage 10/2, then an
// answer with 20/3 and 5 cached tokens read); the run's lev is the real binary under
// `lev serve`. Control: a scripted run (a provider that reports no usage) has no usage
// field at all rather than zeros that would read as measured.
func TestRunUsageRecorded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	var mu sync.Mutex
	turn := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		turn++
		n := turn
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"list_dir","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":2}}`)
			return
		}
		io.WriteString(w, `{"id":"msg_2","type":"message","role":"assistant","content":[{"type":"text","text":"all done"}],"stop_reason":"end_turn","usage":{"input_tokens":20,"output_tokens":3,"cache_read_input_tokens":5}}`)
	}))
	defer up.Close()
	bin := buildLev(t)
	for _, tc := range []struct {
		name string
		env  []string
		want *provider.Usage
	}{
		{"anthropic upstream reports usage", []string{"LEV_PROVIDER=anthropic", "LEV_PROVIDER_BASE_URL=" + up.URL, "LEV_MODEL=claude-test"},
			&provider.Usage{InputTokens: 30, OutputTokens: 5, CacheReadTokens: 5, Calls: 2}},
		{"control: scripted provider reports none", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJailEnv(t)
			mustWrite(t, j.script, "[[rule]]\ntext = \"all done\"\n")
			mustWrite(t, filepath.Join(j.runLever, "agents", "counter.toml"), "name = \"counter\"\nversion = \"1\"\n[stages.s]\nprompt = \"p\"\ntools = [\"list_dir\", \"submit_output\"]\n")
			env := append(append([]string(nil), j.env...), tc.env...)
			serveWith(t, bin, env, "unix:"+j.sock)
			_, errs, code := runLevIn(t, bin, j.wd, env, "run", "counter")
			if code != 0 {
				t.Fatalf("lev run: %d %s", code, errs)
			}
			id := regexpRunID(t, errs)
			raw, err := os.ReadFile(filepath.Join(j.levHome, "runs", id, "run.json"))
			if err != nil {
				t.Fatal(err)
			}
			var rec struct {
				Usage *provider.Usage `json:"usage"`
			}
			json.Unmarshal(raw, &rec)
			out, _, code := runLevIn(t, bin, j.wd, env, "ps", "--json")
			var rows []psRow
			if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 {
				t.Fatalf("lev ps --json: %d %q", code, out)
			}
			for where, got := range map[string]*provider.Usage{"run.json": rec.Usage, "lev ps --json": rows[0].Usage} {
				if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
					t.Errorf("%s usage %+v, want %+v", where, got, tc.want)
				}
			}
		})
	}
}
