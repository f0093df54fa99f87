package mcprun_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/mcp/mcprun"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

// benchEnv is a run's pieces without the daemon: the real taint gate, the sandbox
// executor (kind none), a workdir with one file.
func benchEnv(b *testing.B, cfgText string) (*pipeline.Pipeline, *levconfig.Config, string, pipeline.ProcessStarter) {
	b.Helper()
	root, _ := filepath.EvalSymlinks(b.TempDir())
	wd := filepath.Join(root, "wd")
	os.MkdirAll(wd, 0o755)
	os.WriteFile(filepath.Join(wd, "f.txt"), []byte("hello"), 0o644)
	os.WriteFile(filepath.Join(root, "policy.toml"), nil, 0o644)
	cfg, err := levconfig.Parse(filepath.Join(root, "config.toml"), []byte("[security]\npolicy_file = "+q(filepath.Join(root, "policy.toml"))+"\n"+cfgText))
	if err != nil {
		b.Fatal(err)
	}
	bp := &blueprint.Blueprint{Name: "bench"}
	fsys, _, err := pipeline.BuildFS(bp, cfg, wd, root)
	if err != nil {
		b.Fatal(err)
	}
	env := &pipeline.RunEnv{RunID: "bench", Workdir: fsys.Workdir, RunDir: filepath.Join(root, "run"), Blueprint: bp, Config: cfg}
	gate, err := taintgate.New(env)
	if err != nil {
		b.Fatal(err)
	}
	x, err := sandboxexec.New(context.Background(), env, sandbox.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { x.Close() })
	p := &pipeline.Pipeline{FS: fsys, Gate: gate, Exec: x, Perms: &pipeline.Permissions{User: cfg.Perms}}
	return p, cfg, fsys.Workdir, x
}

// BenchmarkMCPCall: one tool call through the whole pipeline (offer and strict decode,
// permission, fence, taint gate with its audit, execution, observe): the built-in
// read_file against an MCP tool on a stdio server (node, started through the sandbox
// executor) and on a Streamable HTTP server (loopback). The difference is the MCP
// overhead: the JSON-RPC round trip, the caps and the server's own work.
func BenchmarkMCPCall(b *testing.B) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node is not installed")
	}
	js := filepath.Join(b.TempDir(), "hostile.js")
	os.WriteFile(js, []byte(hostileJS), 0o644)
	httpURL, _ := hostileHTTP(b, "ok")
	for _, tc := range []struct {
		name, server, tool, args string
	}{
		{"builtin read_file", "", "read_file", `{"path": "f.txt"}`},
		{"mcp stdio", "command = " + q(node) + "\nargs = [" + q(js) + ", \"ok\"]\n", "mcp__s__probe", `{"text": "x"}`},
		{"mcp streamable http", "url = " + q(httpURL) + "\n", "mcp__s__probe", `{"text": "x"}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := "[tool_permissions]\n\"mcp__s__*\" = \"allow\"\n"
			if tc.server != "" {
				cfg += "[mcp.servers.s]\nclassification = \"local\"\n" + tc.server
			}
			p, c, wd, x := benchEnv(b, cfg)
			if tc.server != "" {
				sess, tools, err := mcprun.Connect(context.Background(), c.MCP.Servers["s"], mcprun.Env{Config: c, Workdir: wd, Exec: x})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { sess.Close() })
				pt, err := mcprun.Tool(sess, c.MCP.Servers["s"], tools[0])
				if err != nil {
					b.Fatal(err)
				}
				p.Tools = map[string]*pipeline.Tool{pt.Name: pt}
			}
			st := pipeline.Stage{Name: "s", Tools: []string{tc.tool}, Dir: filepath.Join(b.TempDir(), "stage")}
			tc := provider.ToolCall{ID: "c", Name: tc.tool, Args: json.RawMessage(tc.args)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, res := p.Handle(context.Background(), st, tc); res.IsError {
					b.Fatalf("%+v", res)
				}
			}
		})
	}
}

// BenchmarkMCPServerStart: start, handshake and tools/list of one server, closed after:
// a node stdio server through the sandbox executor (kind none) and a Streamable HTTP
// server on loopback (already listening: the handshake only).
func BenchmarkMCPServerStart(b *testing.B) {
	node, err := exec.LookPath("node")
	if err != nil {
		b.Skip("node is not installed")
	}
	js := filepath.Join(b.TempDir(), "hostile.js")
	os.WriteFile(js, []byte(hostileJS), 0o644)
	httpURL, _ := hostileHTTP(b, "ok")
	for _, tc := range []struct{ name, server string }{
		{"stdio node", "command = " + q(node) + "\nargs = [" + q(js) + ", \"ok\"]\n"},
		{"streamable http", "url = " + q(httpURL) + "\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, c, wd, x := benchEnv(b, "[mcp.servers.s]\n"+tc.server)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sess, _, err := mcprun.Connect(context.Background(), c.MCP.Servers["s"], mcprun.Env{Config: c, Workdir: wd, Exec: x})
				if err != nil {
					b.Fatal(err)
				}
				sess.Close()
			}
		})
	}
}
