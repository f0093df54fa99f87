package mcprun_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/mcp"
)

// floodJS is a stdio server that, asked to run its tool, sends lev COUNT messages unasked
// at once: sampling requests ("requests") or log notifications ("notes"). argv: MODE
// COUNT MARKER (the marker only names its processes for the test). In "requests" mode it
// collects lev's answers and answers the call once it has all COUNT of them; in "notes"
// mode it never answers, so only lev can end the call.
const floodJS = `
const [mode, count] = [process.argv[2], +process.argv[3]];
const send = (o) => process.stdout.write(JSON.stringify(o) + "\n");
let buf = "", callID = null, answers = 0;
process.stdin.on("data", (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf("\n")) >= 0) { const line = buf.slice(0, i); buf = buf.slice(i + 1); if (line.trim()) handle(JSON.parse(line)); }
});
function handle(m) {
  if (m.method === "server/discover") return send({jsonrpc: "2.0", id: m.id, error: {code: -32601, message: "no"}});
  if (m.method === "initialize") return send({jsonrpc: "2.0", id: m.id, result: {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: "flood", version: "1"}}});
  if (m.method === "tools/list") return send({jsonrpc: "2.0", id: m.id, result: {tools: [{name: "probe", inputSchema: {type: "object"}}]}});
  if (m.method === "tools/call") {
    callID = m.id; answers = 0;
    for (let k = 0; k < count; k++) {
      if (mode === "notes") send({jsonrpc: "2.0", method: "notifications/message", params: {level: "info", data: "x".repeat(512)}});
      else send({jsonrpc: "2.0", id: "f" + k, method: "sampling/createMessage", params: {messages: [{role: "user", content: {type: "text", text: "flood " + k}}], maxTokens: 1}});
    }
    return;
  }
  if (m.method === undefined && String(m.id).startsWith("f") && ++answers === count && mode === "requests") {
    send({jsonrpc: "2.0", id: callID, result: {content: [{type: "text", text: "lev answered all " + count}]}});
  }
}
`

// TestServerFloodDropped: a server that sends lev requests or notifications without end
// (each request is written to the run's mcp_requests.jsonl and the daemon's log) is
// dropped at lev's limits: the call in flight and the next call to the server fail
// saying why, the record holds at most a burst of requests, and the server's processes
// are gone. Controls: a server that sends 8 requests (within the burst) has each
// recorded and gets its call answered; the flood rows' requests reached lev (some are in
// the record, or the drop names the limit they passed).
func TestServerFloodDropped(t *testing.T) {
	node := nodePath(t)
	js := filepath.Join(t.TempDir(), "flood.js")
	os.WriteFile(js, []byte(floodJS), 0o644)
	cases := []struct {
		name, mode string
		count      int
		want       string // "" = the control: the call succeeds
		maxLines   int
	}{
		{"control: 8 requests", "requests", 8, "", 16},
		{"2000 requests at once", "requests", 2000, "MCP server bad: session dropped: it sent requests faster than lev's limit (32 at once, then 4 a second; passed at sampling/createMessage)", mcp.ServerRequestBurst + 8},
		{"20000 notifications at once", "notes", 20000, "MCP server bad: session dropped: it sent notifications faster than lev's limit (1024 at once, then 256 a second; passed at notifications/message)", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			marker := fmt.Sprintf("lev-flood-%d", time.Now().UnixNano())
			w := newWorld(t)
			w.start("[tool_permissions]\n\"mcp__bad__*\" = \"allow\"\n[mcp.servers.bad]\nclassification = \"local\"\ntimeout_seconds = 60\ncommand = "+q(node)+
				"\nargs = ["+q(js)+", "+q(tc.mode)+", \""+strconv.Itoa(tc.count)+"\", "+q(marker)+"]\n", "",
				calls1("s", [2]string{"mcp__bad__probe", `{}`}, [2]string{"mcp__bad__probe", `{}`}))
			w.agent("h", hostileAgent)
			rec := w.run("h", false)
			w.wholeRecord(rec)
			if rec.Status != "completed" {
				t.Fatalf("run %s: %s", rec.Status, rec.Error)
			}
			calls := w.calls(rec, 0)
			if len(calls) < 2 {
				t.Fatalf("calls: %+v", calls)
			}
			b, _ := os.ReadFile(filepath.Join(w.eng.Store.RunDir(rec.ID), "mcp_requests.jsonl"))
			lines := bytes.Count(b, []byte("\n"))
			if lines > tc.maxLines {
				t.Fatalf("mcp_requests.jsonl has %d lines, over %d", lines, tc.maxLines)
			}
			if tc.want == "" {
				for i, c := range calls[:2] {
					if c.IsError || !strings.Contains(c.Result, "lev answered all 8") {
						t.Fatalf("control call %d: %+v", i, c)
					}
				}
				if lines != 2*tc.count {
					t.Fatalf("control: %d requests recorded, want %d", lines, 2*tc.count)
				}
				return
			}
			for i, c := range calls[:2] {
				if !c.IsError || !strings.Contains(c.Result, tc.want) {
					t.Fatalf("call %d: %+v\nwant %q", i, c, tc.want)
				}
			}
			if tc.mode == "requests" && lines == 0 {
				t.Fatal("no request reached the record: the flood never reached lev")
			}
			waitGone(t, marker)
		})
	}
}

// markerProcs lists the host's processes whose command line holds marker.
func markerProcs(marker string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// waitGone polls (generously: the machine is loaded) until no process holds marker.
func waitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := markerProcs(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes outlived the session:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
