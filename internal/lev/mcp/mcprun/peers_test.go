package mcprun_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// everythingHTTP starts server-everything's Streamable HTTP mode on a free loopback port.
func everythingHTTP(t *testing.T, node, dir string) string {
	t.Helper()
	return everythingListening(t, node, dir, "streamableHttp", "/mcp")
}

// everythingListening starts server-everything in mode (streamableHttp, sse) on a free
// loopback port and returns the URL of its endpoint path.
func everythingListening(t *testing.T, node, dir, mode, path string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(node, npmScript(dir, "server-everything"), mode)
	cmd.Env = []string{fmt.Sprintf("PORT=%d", port)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on %s", addr)
		}
	}
	return "http://" + addr + path
}

const everythingAgent = `name = "ev"
version = "1"
[mcp]
servers = ["every"]
[stages.s]
prompt = "p"
tools = ["mcp__every__*", "submit_output"]
`

// TestRealEverythingThroughARun: server-everything over stdio (started through the run's
// sandbox), over Streamable HTTP and over the older HTTP+SSE transport (transport = "sse",
// its GET /sse stream announcing a relative message endpoint); a scripted run calls echo and get-sum through the
// pipeline; the results are in tool_calls.jsonl and run.json lists the server's tools.
// The server is classified outbound with internal clearance, so the gate lets the task's
// Internal data through; the control row leaves it unclassified: the same calls are gated
// (AutoBlock headless), as the fail-closed default of docs/lev-security.md says.
func TestRealEverythingThroughARun(t *testing.T) {
	node, dir := nodePath(t), npmDir(t)
	script := calls1("s", [2]string{"mcp__every__echo", `{"message": "hello lev"}`}, [2]string{"mcp__every__get-sum", `{"a": 2, "b": 40}`})
	for _, tc := range []struct {
		name, server string
		classified   bool
	}{
		{"stdio", "command = " + q(node) + "\nargs = [" + q(npmScript(dir, "server-everything")) + ", \"stdio\"]\nenv = { PATH = \"/usr/bin:/bin\" }\n", true},
		{"streamable HTTP", "url = URL\n", true},
		{"HTTP+SSE", "transport = \"sse\"\nurl = SSEURL\n", true},
		{"control: stdio, unclassified", "command = " + q(node) + "\nargs = [" + q(npmScript(dir, "server-everything")) + ", \"stdio\"]\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			srv := tc.server
			if strings.Contains(srv, "SSEURL") {
				srv = strings.Replace(srv, "SSEURL", q(everythingListening(t, node, dir, "sse", "/sse")), 1)
			} else if strings.Contains(srv, "URL") {
				srv = strings.Replace(srv, "URL", q(everythingHTTP(t, node, dir)), 1)
			}
			class := ""
			if tc.classified {
				class = "classification = \"outbound\"\nclearance = \"internal\"\n"
			}
			w.start("[tool_permissions]\n\"mcp__every__*\" = \"allow\"\n[mcp.servers.every]\ntimeout_seconds = 20\n"+srv+class, "", script)
			w.agent("ev", everythingAgent)
			rec := w.run("ev", false)
			w.wholeRecord(rec)
			if len(rec.MCP) != 1 || !rec.MCP[0].Started || !slices.Contains(rec.MCP[0].Tools, "mcp__every__echo") ||
				(tc.name == "HTTP+SSE") != (rec.MCP[0].Transport == "http+sse") {
				t.Fatalf("run.json mcp: %+v", rec.MCP)
			}
			echo, sum := w.call(rec, "mcp__every__echo"), w.call(rec, "mcp__every__get-sum")
			if !tc.classified {
				for _, c := range []callLine{echo, sum} {
					if c.Refusal == nil || c.Refusal.Step != "gate" || c.Refusal.Code != "AutoBlock" {
						t.Fatalf("unclassified %s: %+v", c.Tool, c)
					}
				}
				if s := sources(w.audit(rec), "mcp__every__echo"); !slices.Equal(s, []string{"AutoBlock"}) {
					t.Fatalf("audit: %v", s)
				}
				return
			}
			if echo.Refusal != nil || echo.Result != "Echo: hello lev" {
				t.Fatalf("echo: %+v", echo)
			}
			if sum.Refusal != nil || !strings.Contains(sum.Result, "is 42") {
				t.Fatalf("get-sum: %+v", sum)
			}
			if rec.Status != "completed" {
				t.Fatalf("run %s: %s", rec.Status, rec.Error)
			}
			t.Logf("FIGURE %s: server start (start + handshake + tools/list) %.1f ms", tc.name, rec.MCP[0].StartMS)
		})
	}
}

const fsAgent = `name = "fsa"
version = "1"
[mcp]
servers = ["fs"]
[read_paths]
allow = ["~/secret"]
[stages.s]
prompt = "p"
tools = ["read_file", "mcp__fs__read_text_file", "submit_output"]
`

// TestRealFilesystemOutsideTheWorkdir: server-filesystem pointed at ~/secret (outside the
// workdir). Unclassified, its read is gated and audited: AutoBlock headless, the same call
// waived by --yolo with YoloAutoApprove beside the AutoBlock. Classified local and granted
// to the agent, it runs (the control). Not granted to this agent (agents = [...]), the
// server never starts and its tool is not offered.
func TestRealFilesystemOutsideTheWorkdir(t *testing.T) {
	node, dir := nodePath(t), npmDir(t)
	fsSrv := func(w *world, extra string) string {
		return "[mcp.servers.fs]\ntimeout_seconds = 20\ncommand = " + q(node) + "\nargs = [" + q(npmScript(dir, "server-filesystem")) + ", " + q(filepath.Join(w.home, "secret")) + "]\n" + extra
	}
	read := [2]string{"mcp__fs__read_text_file", `{"path": "HOME/secret/key.txt"}`}
	for _, tc := range []struct {
		name, extra string
		yolo        bool
		sources     []string
		ran         bool
		started     bool
	}{
		{"unclassified, headless", "", false, []string{"AutoBlock"}, false, true},
		{"unclassified, --yolo", "", true, []string{"AutoBlock", "YoloAutoApprove"}, true, true},
		{"control: classified local and granted", "classification = \"local\"\nagents = [\"fsa\"]\n", false, nil, true, true},
		{"granted to another agent only", "classification = \"local\"\nagents = [\"other\"]\n", false, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.start("[tool_permissions]\n\"mcp__fs__*\" = \"allow\"\n"+fsSrv(w, tc.extra), "", calls1("s", read))
			w.agent("fsa", fsAgent)
			rec := w.run("fsa", tc.yolo)
			w.wholeRecord(rec)
			if len(rec.MCP) != 1 || rec.MCP[0].Started != tc.started {
				t.Fatalf("mcp: %+v", rec.MCP)
			}
			c := w.call(rec, "mcp__fs__read_text_file")
			if !tc.started {
				if c.Refusal == nil || c.Refusal.Code != "not-offered" || !strings.Contains(rec.MCP[0].Why, `does not include "fsa"`) {
					t.Fatalf("not granted: %+v; %+v", c, rec.MCP)
				}
				return
			}
			ran := c.Refusal == nil && strings.Contains(c.Result, "SECRET-KEY-42")
			if ran != tc.ran {
				t.Fatalf("ran = %v, want %v: %+v", ran, tc.ran, c)
			}
			if s := sources(w.audit(rec), "mcp__fs__read_text_file"); !slices.Equal(s, tc.sources) {
				t.Fatalf("audit sources %v, want %v", s, tc.sources)
			}
		})
	}
	_ = os.Getpid
}

// TestRealPermissionsAndRoots: [tool_permissions] in a live run: mcp__every__* = "deny"
// refuses get-sum at the permission step while the exact mcp__every__echo = "allow" runs
// (exact beats the wildcard). roots = true: lev advertises the run's workdir as its one
// root, server-everything then offers get-roots-list, and its roots/list request is
// answered and audited in mcp_requests.jsonl; without it (the control) the tool is absent
// and no request is made.
func TestRealPermissionsAndRoots(t *testing.T) {
	node, dir := nodePath(t), npmDir(t)
	for _, roots := range []bool{false, true} {
		t.Run(fmt.Sprintf("roots=%v", roots), func(t *testing.T) {
			w := newWorld(t)
			cfg := "[tool_permissions]\n\"mcp__every__*\" = \"deny\"\nmcp__every__echo = \"allow\"\n\"mcp__every__get-roots-list\" = \"allow\"\n" +
				"[mcp.servers.every]\ntimeout_seconds = 20\nclassification = \"local\"\ncommand = " + q(node) + "\nargs = [" + q(npmScript(dir, "server-everything")) + ", \"stdio\"]\n"
			if roots {
				cfg += "roots = true\n"
			}
			w.start(cfg, "", calls1("s", [2]string{"mcp__every__echo", `{"message": "hi"}`}, [2]string{"mcp__every__get-sum", `{"a": 1, "b": 2}`},
				[2]string{"mcp__every__get-roots-list", `{}`}))
			w.agent("ev", everythingAgent)
			rec := w.run("ev", false)
			w.wholeRecord(rec)
			if c := w.call(rec, "mcp__every__echo"); c.Refusal != nil || c.Result != "Echo: hi" {
				t.Fatalf("echo: %+v", c)
			}
			if c := w.call(rec, "mcp__every__get-sum"); c.Refusal == nil || c.Refusal.Step != "permission" || c.Refusal.Code != "denied" ||
				!strings.Contains(c.Refusal.Message, "config.toml mcp__every__*") {
				t.Fatalf("get-sum: %+v", c)
			}
			rl := w.call(rec, "mcp__every__get-roots-list")
			audit, _ := os.ReadFile(filepath.Join(w.eng.Store.RunDir(rec.ID), "mcp_requests.jsonl"))
			if !roots {
				if rl.Refusal == nil || rl.Refusal.Code != "not-offered" || len(audit) != 0 {
					t.Fatalf("without roots: %+v; audit %s", rl, audit)
				}
				return
			}
			if rl.Refusal != nil || !strings.Contains(rl.Result, w.wd) {
				t.Fatalf("get-roots-list: %+v", rl)
			}
			if !strings.Contains(string(audit), `"method":"roots/list"`) || !strings.Contains(string(audit), `"decision":"answered"`) {
				t.Fatalf("audit: %s", audit)
			}
		})
	}
}
