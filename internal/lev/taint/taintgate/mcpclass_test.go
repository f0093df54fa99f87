package taintgate

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// TestPolicyTestAgreesWithLiveRunsOnMCPClasses: config.toml classifies MCP servers
// ([mcp.servers.fs] classification = "local", [mcp.servers.web] "outbound" with clearance
// internal), and the policy file classifies the same servers otherwise by wildcard, as the
// config's classification replaces (fs outbound at public, web at private). `lev policy
// test` (the built binary, as the user runs it) and a live run of the same call (engine,
// this gate, the real servers) must reach the same decision. Before the two shared one
// constructor, the dry run ignored config.toml's classification: it said fs's write_text_file
// was blocked (the live run does not gate it) and web's post ran at Private (the live run
// blocks it). The Internal row is the control: the live run lets the post through, so the
// Private row is blocked for its label, and both reach the server when allowed.
func TestPolicyTestAgreesWithLiveRunsOnMCPClasses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the lev binary")
	}
	t.Setenv("LEV_BENCH_SOCKET", "")
	bin := filepath.Join(t.TempDir(), "lev")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/lever-jail/lever/cmd/lev").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const pol = "[tools.\"mcp__fs__*\"]\nclearance = \"public\"\n[tools.\"mcp__web__*\"]\nclearance = \"private\"\n"
	for _, tc := range []struct {
		name, tool, args, target string
		level                    taint.Level
		allowed                  bool
		source                   string
	}{
		{"local server's write at private", "mcp__fs__write_text_file", `{"path": "notes.md", "content": "{{last}}"}`, "notes.md", taint.Private, true, "NotGated"},
		{"outbound server's post at private", "mcp__web__post", `{"url": "https://hooks.example.com/x", "body": "{{last}}"}`, "hooks.example.com", taint.Private, false, string(taint.SourceAutoBlock)},
		{"control: outbound server's post at internal", "mcp__web__post", `{"url": "https://hooks.example.com/x", "body": "x"}`, "hooks.example.com", taint.Internal, true, string(taint.SourceWithinClearance)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.exec = mcpExec
			logs := map[string]string{"fs": logFile(t, "fs"), "web": logFile(t, "web")}
			sc := script("one", tc.tool, tc.args)
			if tc.level == taint.Internal {
				// No grant, and a workdir read: the context stays Internal.
				sc = strings.Replace(sc, "HOME/secret/key.txt", "readme.txt", 1)
			}
			o := w.run(t, runCase{
				tools:   []string{"read_file", "mcp__fs__*", "mcp__web__*"},
				script:  strings.ReplaceAll(sc, "HOME", w.home),
				policy:  pol,
				bpExtra: "[mcp]\nservers = [\"fs\", \"web\"]\n",
				config: stdioServer("fs", "fs", logs["fs"], w.wd, "classification = \"local\"\n") +
					stdioServer("web", "web", logs["web"], w.wd, "classification = \"outbound\"\nclearance = \"internal\"\n"),
				noGrant: tc.level == taint.Internal,
			})
			// The live run's decision: its audit record, or none for a tool it does not gate.
			live := struct {
				allowed bool
				source  string
				taint   taint.Level
			}{true, "NotGated", tc.level}
			for _, r := range calls(o.audit) {
				if r.Tool == tc.tool {
					live.allowed, live.source, live.taint = r.Decision == "allow", string(r.DecisionSource), r.Taint
				}
			}
			server := logs[strings.Split(tc.tool, "__")[1]]
			if reached := received(t, server) != ""; reached != live.allowed {
				t.Fatalf("live decision allowed=%v, but the server was reached: %v (calls %+v; mcp %+v)", live.allowed, reached, toolCalls(t, o.runDir), o.rec.MCP)
			}
			if live.allowed != tc.allowed || live.source != tc.source || live.taint != tc.level {
				t.Fatalf("live run: %+v, want allowed %v by %s at %s (audit %+v)", live, tc.allowed, tc.source, tc.level, o.audit)
			}

			// lev policy test, with the config.toml and policy file the run used.
			cmd := exec.Command(bin, "policy", "test", tc.tool, "--target", tc.target, "--taint", tc.level.String(), "--json")
			cmd.Env = []string{"LEV_HOME=" + w.levHome, "HOME=" + w.home, "PATH=" + os.Getenv("PATH")}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("lev policy test: %v\n%s", err, stderr.String())
			}
			var dry struct {
				Modes map[string]struct {
					Allowed bool
					Source  string
				} `json:"modes"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &dry); err != nil {
				t.Fatalf("lev policy test --json: %v\n%s", err, stdout.String())
			}
			if h := dry.Modes["headless"]; h.Allowed != live.allowed || h.Source != live.source {
				t.Fatalf("lev policy test says headless %+v, the live run %+v\n%s", h, live, stdout.String())
			}
		})
	}
}
