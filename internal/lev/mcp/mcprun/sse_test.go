package mcprun_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// hostileSSE is an MCP server of the older HTTP+SSE transport written for these tests: GET
// /sse opens the event stream, whose first event announces the message endpoint (as
// endpoint says; "" is the relative "/message"); the POSTed requests are answered on that
// stream. tools/call misbehaves as mode says: "frame" answers in one SSE event of n bytes
// (its text is n bytes of x), "hang" never answers ("mute": not even the endpoint event); anything else answers "ok from sse".
// posts counts the POSTs it received.
func hostileSSE(t testing.TB, mode string, n int, endpoint func(base string) string) (string, *atomic.Int64) {
	var posts, sent atomic.Int64
	out := make(chan []byte, 16)
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			fl := w.(http.Flusher)
			if mode == "mute" { // the stream opens, and nothing comes
				fl.Flush()
				<-r.Context().Done()
				return
			}
			ep := "/message?sessionId=1"
			if endpoint != nil {
				ep = endpoint(srv.URL)
			}
			fmt.Fprintf(w, "event: endpoint\ndata: %s\n\n", ep)
			fl.Flush()
			for {
				select {
				case b := <-out:
					k, err := w.Write(b)
					sent.Add(int64(k))
					if err != nil {
						return
					}
					fl.Flush()
				case <-r.Context().Done():
					return
				}
			}
		case r.Method == http.MethodPost && r.URL.Path == "/message":
			posts.Add(1)
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					ProtocolVersion string `json:"protocolVersion"`
				} `json:"params"`
			}
			json.NewDecoder(r.Body).Decode(&m)
			w.WriteHeader(http.StatusAccepted) // the answer goes on the stream
			event := func(v map[string]any) {
				v["jsonrpc"], v["id"] = "2.0", m.ID
				b, _ := json.Marshal(v)
				out <- []byte("event: message\ndata: " + string(b) + "\n\n")
			}
			switch m.Method {
			case "":
			case "server/discover":
				event(map[string]any{"error": map[string]any{"code": -32601, "message": "method not found"}})
			case "initialize":
				event(map[string]any{"result": map[string]any{"protocolVersion": m.Params.ProtocolVersion, "capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "hostile-sse", "version": "1"}}})
			case "tools/list":
				event(map[string]any{"result": map[string]any{"tools": []any{map[string]any{"name": "probe", "inputSchema": map[string]any{"type": "object"}}}}})
			case "tools/call":
				switch mode {
				case "hang":
				case "frame":
					event(map[string]any{"result": map[string]any{"content": []any{map[string]any{"type": "text", "text": strings.Repeat("x", n)}}}})
				default:
					event(map[string]any{"result": map[string]any{"content": []any{map[string]any{"type": "text", "text": "ok from sse"}}}})
				}
			default:
				if len(m.ID) > 0 {
					event(map[string]any{"result": map[string]any{}})
				}
			}
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/sse", &posts
}

// TestHostileSSEServers: lev speaks the HTTP+SSE transport (transport = "sse") to hostile
// servers through a real daemon's run. One event past 8 MiB is refused with the
// message docs/mcp.md shows and drops the session (a 7 MiB one passes: the control); a server announcing
// its message endpoint at another origin is refused before lev sends it anything (its
// own origin, spelled absolutely or in upper case, is the control); a server that never
// answers a call, or never announces its endpoint, hits the deadline. The record stays whole; the heap stays near the cap.
func TestHostileSSEServers(t *testing.T) {
	// Another origin on loopback: a second server, which must never see a request.
	var stolen atomic.Int64
	thief := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer thief.Close()
	thiefHost := strings.TrimPrefix(thief.URL, "http://")
	for _, tc := range []struct {
		name     string
		mode     string
		n        int
		endpoint func(base string) string
		want     string // in the calls' results, or in run.json's error when connectErr
		connect  bool   // the refusal is at connect: the server never starts
	}{
		{"control: relative endpoint", "ok", 0, nil, "ok from sse", false},
		// tool_calls.jsonl keeps a result's first 4096 bytes.
		{"control: 7 MiB SSE frame", "frame", 7 << 20, nil, strings.Repeat("x", 4096) + "…", false},
		{"9 MiB SSE frame", "frame", 9 << 20, nil, "stream frame exceeded 8 MiB from the MCP server bad", false},
		{"never answers", "hang", 0, nil, "MCP server bad did not answer tools/call probe within 2s", false},
		{"never sends its endpoint", "mute", 0, nil, "MCP server bad did not answer initialize within 2s", true},
		{"control: endpoint at its own origin, absolute", "ok", 0, func(b string) string { return b + "/message?sessionId=1" }, "ok from sse", false},
		{"control: its own origin, scheme in upper case", "ok", 0, func(b string) string { return strings.ToUpper(b) + "/message?sessionId=1" }, "ok from sse", false},
		{"endpoint at another port", "ok", 0, func(string) string { return thief.URL + "/message?sessionId=1" }, "MCP server bad announced its message endpoint at " + thief.URL + ", another origin than its url's", true},
		{"endpoint at another host, scheme-relative", "ok", 0, func(string) string { return "//" + thiefHost + "/message" }, "announced its message endpoint at " + thief.URL, true},
		{"endpoint at another scheme", "ok", 0, func(b string) string { return strings.Replace(b, "http:", "https:", 1) + "/message" }, "another origin than its url's", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, posts := hostileSSE(t, tc.mode, tc.n, tc.endpoint)
			w := newWorld(t)
			w.start("[tool_permissions]\n\"mcp__bad__*\" = \"allow\"\n[mcp.servers.bad]\nclassification = \"local\"\ntimeout_seconds = 2\ntransport = \"sse\"\nurl = "+q(u)+"\n", "",
				calls1("s", [2]string{"mcp__bad__probe", `{}`}, [2]string{"mcp__bad__probe", `{}`}))
			w.agent("h", hostileAgent)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			rec := w.run("h", false)
			runtime.ReadMemStats(&after)
			w.wholeRecord(rec)
			if rec.Status != "completed" {
				t.Fatalf("run %s: %s", rec.Status, rec.Error)
			}
			if len(rec.MCP) != 1 || rec.MCP[0].Transport != "http+sse" {
				t.Fatalf("run.json mcp: %+v", rec.MCP)
			}
			calls := w.calls(rec, 0)
			if len(calls) < 2 {
				t.Fatalf("calls: %+v", calls)
			}
			if tc.connect {
				st := rec.MCP[0]
				if st.Started || !strings.Contains(st.Error, tc.want) {
					t.Fatalf("run.json mcp: %+v\nwant %q", st, tc.want)
				}
				for _, c := range calls[:2] {
					if c.Refusal == nil || c.Refusal.Code != "not-offered" {
						t.Fatalf("%s: %+v", c.Tool, c)
					}
				}
				if posts.Load() != 0 || stolen.Load() != 0 {
					t.Fatalf("requests sent: %d to the server, %d to the other origin", posts.Load(), stolen.Load())
				}
				return
			}
			if !rec.MCP[0].Started {
				t.Fatalf("run.json mcp: %+v", rec.MCP)
			}
			for i, c := range calls[:2] {
				if strings.HasPrefix(tc.name, "control") {
					if c.IsError || c.Result != tc.want {
						t.Fatalf("control call %d: error %v, %d bytes: %.200s", i, c.IsError, len(c.Result), c.Result)
					}
					continue
				}
				// The second call finds the session dropped and says why (the cap), except
				// after a deadline, which does not drop a session.
				if !c.IsError || !strings.Contains(c.Result, tc.want) && !(i == 1 && tc.mode == "hang") {
					t.Fatalf("call %d: %+v\nwant %q", i, c, tc.want)
				}
			}
			if stolen.Load() != 0 {
				t.Fatalf("the other origin got %d requests", stolen.Load())
			}
			grew := int64(after.TotalAlloc-before.TotalAlloc) >> 20
			t.Logf("FIGURE %s: %d MiB allocated in the test process during the run", tc.name, grew)
			// Bounded for the attacks only: the 7 MiB control's result legitimately flows
			// through the whole pipeline (transcript, provider requests) twice.
			if grew > 200 && !strings.HasPrefix(tc.name, "control") {
				t.Errorf("allocated %d MiB", grew)
			}
		})
	}
}
