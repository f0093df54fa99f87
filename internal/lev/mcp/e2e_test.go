//go:build e2e

package mcp

import (
	"context"
	"encoding/json"
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

// The real peers: @modelcontextprotocol/server-everything and server-filesystem from npm,
// installed by .ci/run (phase "mcp servers") or `make mcp-servers` into LEV_MCP_SERVERS
// (default: the worktree's .cache/mcp). Without node or the install the tests skip, except
// under CI=true, where they fail.

func npmServers(t *testing.T) (node, dir string) {
	t.Helper()
	need := func(format string, a ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf(format, a...)
		}
		t.Skipf(format, a...)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		need("node is not installed (apt-get install nodejs npm)")
	}
	dir = os.Getenv("LEV_MCP_SERVERS")
	if dir == "" {
		dir, _ = filepath.Abs("../../../.cache/mcp")
	}
	for _, p := range []string{"server-everything", "server-filesystem"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules/@modelcontextprotocol", p, "dist/index.js")); err != nil {
			need("MCP servers not installed in %s (run `make mcp-servers`): %v", dir, err)
		}
	}
	return node, dir
}

func script(dir, pkg string) string {
	return filepath.Join(dir, "node_modules/@modelcontextprotocol", pkg, "dist/index.js")
}

// everythingHTTP starts server-everything's Streamable HTTP mode on a free loopback port
// and returns its endpoint.
func everythingHTTP(t *testing.T, node, dir string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	start := time.Now()
	cmd := exec.Command(node, script(dir, "server-everything"), "streamableHttp")
	cmd.Env = []string{fmt.Sprintf("PORT=%d", port)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Logf("FIGURE streamable HTTP: server-everything listening %v after exec", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on %s", addr)
		}
	}
	return "http://" + addr + "/mcp"
}

// TestEverything: list tools and call echo and get-sum over stdio and Streamable HTTP.
// The tools the server registers only for clients that advertise sampling, elicitation or
// roots are absent: the server saw that lev offers none of them. Figures: start time and
// per-call latency.
func TestEverything(t *testing.T) {
	node, dir := npmServers(t)
	cases := []struct {
		name string
		srv  func() Server
	}{
		{"stdio", func() Server {
			return Server{Name: "everything", Command: node, Args: []string{script(dir, "server-everything"), "stdio"}}
		}},
		{"streamable HTTP", func() Server {
			return Server{Name: "everything", URL: everythingHTTP(t, node, dir)}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.srv()
			start := time.Now()
			s := connect(t, srv, Options{Timeout: 20 * time.Second})
			started := time.Since(start)
			tools, err := s.Tools(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tl := range tools {
				names = append(names, tl.Name)
				if !json.Valid(tl.InputSchema) {
					t.Errorf("%s: schema %s", tl.Name, tl.InputSchema)
				}
			}
			for _, want := range []string{"echo", "get-sum", "get-env"} {
				if !slices.Contains(names, want) {
					t.Fatalf("tools %v lack %s", names, want)
				}
			}
			for _, absent := range []string{"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"} {
				if slices.Contains(names, absent) {
					t.Errorf("server offers %s: it believes lev has that capability", absent)
				}
			}
			res, err := s.Call(context.Background(), "echo", json.RawMessage(`{"message":"hello lev"}`))
			if err != nil || res.Text != "Echo: hello lev" || res.IsError {
				t.Fatalf("echo = %+v, %v", res, err)
			}
			res, err = s.Call(context.Background(), "get-sum", json.RawMessage(`{"a":2,"b":40}`))
			if err != nil || !strings.Contains(res.Text, "is 42") {
				t.Fatalf("get-sum = %+v, %v", res, err)
			}
			// A call the server rejects comes back as IsError (the control for the above).
			res, err = s.Call(context.Background(), "get-sum", json.RawMessage(`{"a":"x"}`))
			if err == nil && !res.IsError {
				t.Fatalf("bad arguments accepted: %+v", res)
			}
			const n = 50
			t0 := time.Now()
			for i := 0; i < n; i++ {
				if _, err := s.Call(context.Background(), "echo", json.RawMessage(`{"message":"x"}`)); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("FIGURE %s: connect (start + handshake) %v, %d tools, echo %v per call (mean of %d)",
				tc.name, started.Round(time.Millisecond), len(tools), (time.Since(t0) / n).Round(time.Microsecond), n)
		})
	}
}

// TestEverythingEnvironment: the real server's get-env tool prints its process
// environment: exactly what lev passed, none of lev's own.
func TestEverythingEnvironment(t *testing.T) {
	node, dir := npmServers(t)
	t.Setenv("LEV_TOKEN", "lev-secret-token")
	t.Setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
	s := connect(t, Server{Name: "everything", Command: node, Args: []string{script(dir, "server-everything"), "stdio"},
		Env: []string{"GREETING=hello"}}, Options{Timeout: 20 * time.Second})
	res, err := s.Call(context.Background(), "get-env", nil)
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(res.Text), &env); err != nil {
		t.Fatalf("get-env: %v\n%s", err, res.Text)
	}
	if env["GREETING"] != "hello" { // the control: what was passed arrives
		t.Fatalf("GREETING not passed: %v", env)
	}
	for k := range env {
		if k != "GREETING" {
			t.Errorf("the server sees %s, which lev did not pass", k)
		}
	}
}

// TestFilesystem: server-filesystem over stdio, pointed at a temp dir: reads a file in it,
// and is refused (by the server, IsError) a file outside it.
func TestFilesystem(t *testing.T) {
	node, dir := npmServers(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from the workdir\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(outside, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := connect(t, Server{Name: "fs", Command: node, Args: []string{script(dir, "server-filesystem"), root}}, Options{Timeout: 20 * time.Second})
	tools, err := s.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) < 5 {
		t.Fatalf("tools: %v", tools)
	}
	args, _ := json.Marshal(map[string]string{"path": filepath.Join(root, "hello.txt")})
	res, err := s.Call(context.Background(), "read_text_file", args)
	if err != nil || res.IsError || !strings.Contains(res.Text, "hello from the workdir") {
		t.Fatalf("read_text_file = %+v, %v", res, err)
	}
	args, _ = json.Marshal(map[string]string{"path": outside})
	res, err = s.Call(context.Background(), "read_text_file", args)
	if err != nil || !res.IsError || strings.Contains(res.Text, "secret\n") {
		t.Fatalf("outside read = %+v, %v", res, err)
	}
}
