//go:build e2e

package bringup_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/testutil"
)

// wbMCP is a stdio MCP server in bash (the workbench has bash, sed and coreutils, no
// node): one tool, "where", answering where it runs, told by what it can see: lev's token
// is in lev's container only.
const wbMCP = `#!/bin/bash
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  case "$line" in
  *'"method":"server/discover"'*) printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}\n' "$id" ;;
  *'"method":"initialize"'*)
    ver=$(printf '%s' "$line" | sed -n 's/.*"protocolVersion":"\([^"]*\)".*/\1/p')
    printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"%s","capabilities":{"tools":{}},"serverInfo":{"name":"wb","version":"1"}}}\n' "$id" "$ver" ;;
  *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"where","inputSchema":{"type":"object"}}]}}\n' "$id" ;;
  *'"method":"tools/call"'*)
    if [ -e /run/lever/token ]; then w="lev-container"; else w="workbench"; fi
    if [ -e /run/lever-bench ]; then b="bench-dir"; else b="no-bench-dir"; fi
    printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"where=%s %s token-env=%s"}]}}\n' "$id" "$w" "$b" "${LEV_TOKEN:-none}" ;;
  esac
done
`

// TestMCPInTheJailNetns is docs/mcp.md's jail case on the netns substrate, through the host
// commands only: the manager's lev uses an MCP server running on the host (the real
// server-everything over Streamable HTTP, listening on the host side of the jail's link)
// reached through a port in manager.allow_ports, and a stdio server started inside the
// workbench through the exec channel's stream mode. The results are in the run record; a
// second server on a port not in allow_ports (the control for the firewall) never starts.
func TestMCPInTheJailNetns(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is not installed")
		}
		t.Skip("node is not installed")
	}
	mcpDir := os.Getenv("LEV_MCP_SERVERS")
	if mcpDir == "" {
		mcpDir, _ = filepath.Abs("../../.cache/mcp")
	}
	everything := filepath.Join(mcpDir, "node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	if _, err := os.Stat(everything); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("MCP servers not installed (make mcp-servers): %v", err)
		}
		t.Skipf("MCP servers not installed (make mcp-servers): %v", err)
	}
	dir, proj, sfx := netnsProject(t, "lvtm")
	if code, out, errs := leverIO("init", proj); code != 0 {
		t.Fatalf("lever init: exit %d\n%s%s", code, out, errs)
	}
	cfgPath := filepath.Join(proj, "lever.yaml")
	yml, _ := os.ReadFile(cfgPath)

	key := "sk-lvtm-" + sfx + "-" + sfx + sfx
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	var model atomic.Pointer[testutil.StandIn]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { model.Load().ServeHTTP(w, r) }))
	defer srv.Close()
	jailPort, adminPort, mcpPort, closedPort := freePort(t), freePort(t), freePort(t), freePort(t)
	os.WriteFile(filepath.Join(proj, "wb-mcp.sh"), []byte(wbMCP), 0o755)

	// The host's MCP server and the user's lev settings need the jail link's host address,
	// which exists once the jail is up: the config is written, then lever up.
	settings := filepath.Join(dir, "lev-settings")
	os.MkdirAll(filepath.Join(settings, "agents"), 0o755)
	os.WriteFile(filepath.Join(settings, "config.toml"), []byte("[provider]\nmodel = \"stand-in\"\n"), 0o644)
	edited := editInitYAML(t, string(yml), []yamlEdit{
		{`(?m)^name: .*$`, "name: m" + sfx},
		{`(?m)^backend: .*$`, "backend: netns"},
		{`(?m)^  allow_ports: .*$`, fmt.Sprintf("  allow_ports: [%d, %d]", jailPort, mcpPort)},
		{`(?m)^  api_key_file: .*$`, "  api_key_file: " + keyFile},
		{`(?m)^  llm_upstream: .*$`, "  llm_upstream: " + srv.URL + "/v1"},
		{`(?m)^  jail_port: .*$`, fmt.Sprintf("  jail_port: %d", jailPort)},
		{`(?m)^  admin_port: .*$`, fmt.Sprintf("  admin_port: %d", adminPort)},
		{`(?m)^lev:$`, "lev:\n  config: " + filepath.Join(settings, "config.toml") + "\n  agents: " + filepath.Join(settings, "agents")},
	})
	os.WriteFile(cfgPath, []byte(edited), 0o644)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("the edited lever.yaml: %v\n%s", err, edited)
	}
	be, err := backend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lever(t, "destroy", "-c", cfgPath)
		bringup.TeardownInPlace(context.Background(), be)
	})
	out, code := lever(t, "up", "-c", cfgPath)
	t.Logf("lever up:\n%s", out)
	if code != 0 {
		t.Fatalf("up: exit %d", code)
	}
	hv4, _ := be.(interface {
		HostAddrs() (netip.Addr, netip.Addr)
	}).HostAddrs()

	// server-everything on the host side of the jail's link (loopback is not forwarded).
	ev := exec.Command(node, everything, "streamableHttp")
	ev.Env = []string{fmt.Sprintf("PORT=%d", mcpPort)}
	if err := ev.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { ev.Process.Kill(); ev.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", mcpPort)); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("server-everything did not listen")
		}
	}
	// The control for the firewall: a second HTTP MCP server on a port not in allow_ports.
	closedLn, err := net.Listen("tcp", fmt.Sprintf("%s:%d", hv4, closedPort))
	if err != nil {
		t.Fatal(err)
	}
	var closedHits atomic.Int64
	closedSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { closedHits.Add(1) })}
	go closedSrv.Serve(closedLn)
	defer closedSrv.Close()

	levCfg := fmt.Sprintf("[provider]\nmodel = \"stand-in\"\n[tool_permissions]\n\"mcp__hostev__*\" = \"allow\"\n\"mcp__wb__*\" = \"allow\"\n"+
		"[mcp.servers.hostev]\nurl = \"http://%s:%d/mcp\"\nclassification = \"outbound\"\nclearance = \"internal\"\ntimeout_seconds = 20\n"+
		"[mcp.servers.closed]\nurl = \"http://%s:%d/mcp\"\ntimeout_seconds = 3\n"+
		"[mcp.servers.wb]\ncommand = \"/bin/bash\"\nargs = [\"/lever/wb-mcp.sh\"]\nclassification = \"local\"\ntimeout_seconds = 20\n", hv4, mcpPort, hv4, closedPort)
	os.WriteFile(filepath.Join(settings, "config.toml"), []byte(levCfg), 0o644)
	os.WriteFile(filepath.Join(settings, "agents", "mcp.toml"), []byte("name = \"mcp\"\nversion = \"1\"\n[mcp]\nservers = [\"hostev\", \"wb\", \"closed\"]\n[stages.s]\ntools = [\"mcp__hostev__echo\", \"mcp__wb__*\", \"mcp__closed__*\", \"submit_output\"]\nmax_turns = 6\n"), 0o644)
	// The settings are pushed at up; apply them again now that they name the link's address.
	if out, code := lever(t, "up", "-c", cfgPath); code != 0 {
		t.Fatalf("up again with the MCP settings: exit %d\n%s", code, out)
	}

	task := &testutil.StandIn{Steps: []testutil.Step{
		{Tool: "mcp__hostev__echo", Args: map[string]string{"message": "from the jail " + sfx}},
		{Tool: "mcp__wb__where", Args: map[string]string{}},
		{Tool: "submit_output", Args: map[string]string{"output": "mcp done " + sfx}},
	}}
	model.Store(task)
	code, stdout, errs := leverIO("run", "-c", cfgPath, "mcp")
	t.Logf("lever run mcp: exit %d\n%s%s", code, stdout, errs)
	if code != 0 || !strings.Contains(stdout, "mcp done "+sfx) {
		t.Fatalf("lever run mcp did not complete")
	}
	_, _, results := task.Seen()
	if len(results) < 2 {
		t.Fatalf("the model saw %d tool results: %q", len(results), results)
	}
	if results[0] != "Echo: from the jail "+sfx {
		t.Errorf("the host's server-everything through the allowed port: %q", results[0])
	}
	if results[1] != "where=workbench bench-dir token-env=none" {
		t.Errorf("the stdio server ran elsewhere than the workbench, or saw lev's token: %q", results[1])
	}
	id := regexp.MustCompile(`run (r-[0-9a-f-]+)`).FindStringSubmatch(stdout + errs)
	if id == nil {
		t.Fatalf("no run id")
	}
	runDir := filepath.Join(cfg.StateDir(), "guest", "levhome", "manager", "runs", id[1])
	if real, err := filepath.EvalSymlinks(filepath.Join(cfg.StateDir(), "guest")); err == nil {
		runDir = filepath.Join(real, "levhome", "manager", "runs", id[1])
	}
	rec, err := os.ReadFile(filepath.Join(runDir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"server": "hostev"`, `"mcp__hostev__echo"`, `"server": "wb"`, `"mcp__wb__where"`, `"server": "closed"`} {
		if !strings.Contains(strings.ReplaceAll(string(rec), `":"`, `": "`), want) {
			t.Errorf("run.json lacks %s:\n%s", want, rec)
		}
	}
	// The port not in allow_ports: the server never started, nothing reached it.
	if !regexp.MustCompile(`"server":\s*"closed"[^}]*"started":\s*false[^}]*"error"`).Match(rec) || closedHits.Load() != 0 {
		t.Errorf("the server behind a port outside allow_ports: hits %d; run.json:\n%s", closedHits.Load(), rec)
	}
	calls, _ := os.ReadFile(filepath.Join(runDir, "stages", "0", "tool_calls.jsonl"))
	if !strings.Contains(string(calls), "Echo: from the jail "+sfx) || !strings.Contains(string(calls), "where=workbench") {
		t.Errorf("tool_calls.jsonl:\n%s", calls)
	}
}
