package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// echoJS is a minimal stdio MCP server: one tool, "echo", answering its "text" argument.
const echoJS = `
const send = (o) => process.stdout.write(JSON.stringify(o) + "\n");
let buf = "";
process.stdin.on("data", (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf("\n")) >= 0) {
    const m = JSON.parse(buf.slice(0, i)); buf = buf.slice(i + 1);
    if (m.method === "server/discover") send({jsonrpc: "2.0", id: m.id, error: {code: -32601, message: "method not found"}});
    else if (m.method === "initialize") send({jsonrpc: "2.0", id: m.id, result: {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: "echo", version: "1"}}});
    else if (m.method === "tools/list") send({jsonrpc: "2.0", id: m.id, result: {tools: [{name: "echo", inputSchema: {type: "object"}}, {name: "shell", inputSchema: {type: "object"}}]}});
    else if (m.method === "tools/call") send({jsonrpc: "2.0", id: m.id, result: {content: [{type: "text", text: "echo: " + m.params.arguments.text}]}});
  }
});
`

// TestBinaryMCPCommands drives the built lev: lev mcp list (text and --json), lev mcp test
// (list; a call through permission and gate; a deny; a headless ask and its --allow
// control; strict arguments; an unknown server), lev validate's grant lines.
func TestBinaryMCPCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is not installed")
		}
		t.Skip("node is not installed")
	}
	bin := buildLev(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	levHome, wd := filepath.Join(root, "lev"), filepath.Join(root, "wd")
	os.MkdirAll(filepath.Join(levHome, "agents"), 0o755)
	os.MkdirAll(wd, 0o755)
	js := filepath.Join(root, "echo.js")
	os.WriteFile(js, []byte(echoJS), 0o644)
	cfg := "[tool_permissions]\nmcp__echo__echo = \"allow\"\n\"mcp__shut__*\" = \"deny\"\n" +
		"[mcp.servers.echo]\ncommand = " + jsonArg(node) + "\nargs = [" + jsonArg(js) + "]\nclassification = \"local\"\nagents = [\"a\"]\n" +
		"[mcp.servers.ask]\ncommand = " + jsonArg(node) + "\nargs = [" + jsonArg(js) + "]\nclassification = \"local\"\n" +
		"[mcp.servers.shut]\ncommand = " + jsonArg(node) + "\nargs = [" + jsonArg(js) + "]\n" +
		"[mcp.servers.gone]\nurl = \"http://127.0.0.1:9/mcp\"\ntimeout_seconds = 2\n"
	os.WriteFile(filepath.Join(levHome, "config.toml"), []byte(cfg), 0o600)
	os.WriteFile(filepath.Join(levHome, "agents", "a.toml"), []byte("name = \"a\"\nversion = \"1\"\n[mcp]\nservers = [\"echo\", \"slack\"]\n[stages.s]\nprompt = \"p\"\ntools = [\"mcp__echo__*\"]\n"), 0o644)
	os.WriteFile(filepath.Join(levHome, "agents", "b.toml"), []byte("name = \"b\"\nversion = \"1\"\n[mcp]\nservers = [\"echo\"]\n[stages.s]\nprompt = \"p\"\n"), 0o644)
	env := []string{"LEV_HOME=" + levHome, "PATH=" + os.Getenv("PATH"), "HOME=" + root}

	out, errOut, code := runLev(t, bin, env, "mcp", "list", "--json")
	var list []mcpServerInfo
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 4 {
		t.Fatalf("mcp list --json: %d %s %s", code, out, errOut)
	}
	byName := map[string]mcpServerInfo{}
	for _, s := range list {
		byName[s.Name] = s
	}
	if e := byName["echo"]; e.State != "ok" || strings.Join(e.Tools, ",") != "mcp__echo__echo" || len(e.Refused) != 1 || !strings.Contains(e.Refused[0], `"shell", the name of a lev built-in tool`) {
		t.Fatalf("echo: %+v", e)
	}
	if g := byName["gone"]; g.State != "failed" || !strings.Contains(g.Error, "connection refused") {
		t.Fatalf("gone: %+v", g)
	}
	if s := byName["shut"]; !strings.HasPrefix(s.Classification, "unclassified") {
		t.Fatalf("shut: %+v", s)
	}

	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"list tools", []string{"mcp", "test", "echo"}, 0, []string{"✓ echo started (stdio)", "  mcp__echo__echo", `refused: MCP server echo offers a tool named "shell"`}},
		{"call allowed", []string{"mcp", "test", "echo", "echo", "--args", `{"text": "hi"}`}, 0, []string{"permission: allow (config.toml)", "gate: allowed (NotGated", "result: echo: hi"}},
		{"call denied by mcp__SERVER__*", []string{"mcp", "test", "shut", "echo", "--args", `{"text": "hi"}`}, 1, []string{`permission: deny (config.toml mcp__shut__*)`, "refused at permission: mcp__shut__echo: refused: [tool_permissions] mcp__shut__echo = \"deny\""}},
		{"deny is not lifted by --yolo", []string{"mcp", "test", "shut", "echo", "--yolo"}, 1, []string{"refused at permission"}},
		{"ask, nobody to answer", []string{"mcp", "test", "ask", "echo", "--args", `{"text": "hi"}`}, 1, []string{"refused at permission: mcp__ask__echo: refused: permission is \"ask\""}},
		{"control: ask lifted by --allow", []string{"mcp", "test", "ask", "echo", "--args", `{"text": "hi"}`, "--allow"}, 0, []string{"ask lifted by --allow", "result: echo: hi"}},
		{"arguments decode strictly", []string{"mcp", "test", "echo", "echo", "--args", `{"text": "a", "Text": "b"}`}, 1, []string{`refused at offer: mcp__echo__echo: bad arguments: arguments "text" and "Text" are the same key in a different case`}},
		{"unknown server", []string{"mcp", "test", "nope"}, 2, []string{}},
		{"validate: granted and not", []string{"validate", "a"}, 0, []string{"WARN MCP servers not granted: slack", "NOTE declares MCP servers: 2 declared, 1 granted", "echo: granted by [mcp.servers.echo] agents (stdio, local)", "slack: NOT granted (config.toml has no [mcp.servers.slack]"}},
		{"validate: agent not listed", []string{"validate", "b"}, 0, []string{`echo: NOT granted ([mcp.servers.echo] agents = ["a"] does not include "b")`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runLev(t, bin, env, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s%s", w, out, errOut)
				}
			}
		})
	}
}
