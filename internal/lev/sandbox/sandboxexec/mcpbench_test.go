package sandboxexec

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/bench"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

// whereJS is a stdio MCP server whose one tool answers the content of the file named by
// its argument, and its working directory: what it reads from the bench's "shadow" says
// where it runs.
const whereJS = `
const fs = require("fs");
const send = (o) => process.stdout.write(JSON.stringify(o) + "\n");
let buf = "";
process.stdin.on("data", (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf("\n")) >= 0) {
    const m = JSON.parse(buf.slice(0, i)); buf = buf.slice(i + 1);
    if (m.method === "server/discover") send({jsonrpc: "2.0", id: m.id, error: {code: -32601, message: "method not found"}});
    else if (m.method === "initialize") send({jsonrpc: "2.0", id: m.id, result: {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: "where", version: "1"}}});
    else if (m.method === "tools/list") send({jsonrpc: "2.0", id: m.id, result: {tools: [{name: "where", inputSchema: {type: "object"}}]}});
    else if (m.method === "tools/call") {
      let t; try { t = fs.readFileSync(m.params.arguments.path, "utf8"); } catch (e) { t = "ERR " + e.code; }
      send({jsonrpc: "2.0", id: m.id, result: {content: [{type: "text", text: "where=" + t + " cwd=" + process.cwd()}]}});
    }
  }
});
`

// TestMCPStdioServerRunsInBench: with LEV_BENCH_SOCKET set, a run's stdio MCP server is
// started in the workbench through the exec channel's stream mode (it reads the bench's
// "shadow"), for the [sandbox] kinds, never beside lev; without it (the control) the same
// server runs beside lev and reads lev's side. Either way it runs in "/", not in the
// run's workdir (mcprun.ServerDir), though the sandbox is set up from the workdir.
func TestMCPStdioServerRunsInBench(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is not installed")
		}
		t.Skip("node is not installed")
	}
	node, _ = filepath.EvalSymlinks(node)
	f := startBench(t)
	js := filepath.Join(f.dir, "where.js")
	os.WriteFile(js, []byte(whereJS), 0o644)
	for _, tc := range []struct {
		name, sandbox string
		bench         bool
		want          string
	}{
		{"no bench: beside lev (control)", "kind = \"none\"\n", false, "where=lev cwd=/"},
		{"kind none", "kind = \"none\"\n", true, "where=bench cwd=/"},
		{"kind namespace, network off", "kind = \"namespace\"\nnetwork = false\n", true, "where=bench cwd=/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bench {
				t.Setenv(bench.Env, f.sock)
			} else {
				t.Setenv(bench.Env, "")
			}
			dir := t.TempDir()
			wd := filepath.Join(dir, "wd")
			os.MkdirAll(wd, 0o755)
			os.MkdirAll(filepath.Join(dir, "agents"), 0o755)
			os.WriteFile(filepath.Join(dir, "agents", "mb.toml"), []byte("name = \"mb\"\nversion = \"1\"\n[mcp]\nservers = [\"where\"]\n[stages.one]\nprompt = \"a\"\ntools = [\"mcp__where__where\", \"submit_output\"]\n"), 0o644)
			q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
			script := "[[rule]]\nstage = \"one\"\nturn = 1\n[[rule.call]]\ntool = \"mcp__where__where\"\nargs = '{\"path\": " + q(filepath.Join(f.shadow, "where")) + "}'\n\n[[rule]]\nstage = \"one\"\nturn = 2\ntext = \"done\"\n"
			os.WriteFile(filepath.Join(dir, "script.toml"), []byte(script), 0o644)
			cfg, err := levconfig.Parse(filepath.Join(dir, "config.toml"), []byte("[provider]\nkind = \"scripted\"\nscript = "+q(filepath.Join(dir, "script.toml"))+
				"\n[tool_permissions]\n\"mcp__where__*\" = \"allow\"\n[sandbox]\n"+tc.sandbox+
				"[mcp.servers.where]\nclassification = \"local\"\ntimeout_seconds = 20\ncommand = "+q(node)+"\nargs = ["+q(js)+"]\n"))
			if err != nil {
				t.Fatal(err)
			}
			eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(dir, "lev", "runs")}, AgentsDir: filepath.Join(dir, "agents"),
				Config: func() *levconfig.Config { return cfg }, Home: dir, Log: t.Logf,
				NewGate: taintgate.Factory, NewExecutor: Factory}
			rec, err := eng.Start(context.Background(), runner.Spec{Agent: "mb", Workdir: wd})
			if err != nil {
				t.Fatal(err)
			}
			eng.Wait()
			rec, _ = eng.Store.Load(rec.ID)
			if len(rec.MCP) != 1 || !rec.MCP[0].Started {
				t.Fatalf("mcp: %+v", rec.MCP)
			}
			fh, err := os.Open(filepath.Join(eng.Store.StageDir(rec.ID, 0), "tool_calls.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			sc := bufio.NewScanner(fh)
			sc.Scan()
			var line struct{ Tool, Result string }
			json.Unmarshal(sc.Bytes(), &line)
			if line.Tool != "mcp__where__where" || strings.TrimSpace(line.Result) != tc.want {
				t.Fatalf("call: %+v, want %q", line, tc.want)
			}
		})
	}
}
