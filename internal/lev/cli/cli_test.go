package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"net"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/runner"
)

const ctoBlueprint = `name = "cto"
version = "1.0.0"
[read_paths]
allow = ["~/.leviath/runs", "glob:~/design-docs/**"]
[stages.analyze]
tools = ["read_file"]
[stages.plan]
tools = ["read_file"]
[stages.report]
tools = ["submit_output"]
`

// TestValidateReport: the output docs/lev.md shows, character for character.
func TestValidateReport(t *testing.T) {
	bp, err := blueprint.Parse("/agents/cto.toml", []byte(ctoBlueprint), pipeline.Known)
	if err != nil {
		t.Fatal(err)
	}
	bp.Installed = "cto" // as blueprint.Install sets it for agents/cto.toml
	cases := []struct {
		name, config, want string
	}{
		{"one of two granted", "[agent_read_paths.cto]\nallow = [\"~/.leviath/runs\"]\n",
			`✓ Blueprint 'cto' is valid.
  3 stages, version 1.0.0
  file /agents/cto.toml, installed as 'cto': per-agent grants come from [agent_read_paths.cto]
  WARN your config does not grant glob:~/design-docs/**: reads matching them will be refused [read-paths-not-granted]
       add to your config.toml: [agent_read_paths.cto] allow = ["glob:~/design-docs/**"]
  NOTE declares [read_paths] (reads outside the run workdir): 2 declared, 1 granted [read-paths-declared]
       ~/.leviath/runs: granted; glob:~/design-docs/**: NOT granted
  NOTE grants given to /agents/cto.toml: ~/.leviath/runs by [agent_read_paths.cto] [read-paths-granted]
`},
		{"none granted", "",
			`✓ Blueprint 'cto' is valid.
  3 stages, version 1.0.0
  file /agents/cto.toml, installed as 'cto': per-agent grants come from [agent_read_paths.cto]
  WARN your config does not grant ~/.leviath/runs, glob:~/design-docs/**: reads matching them will be refused [read-paths-not-granted]
       add to your config.toml: [agent_read_paths.cto] allow = ["~/.leviath/runs", "glob:~/design-docs/**"]
  NOTE declares [read_paths] (reads outside the run workdir): 2 declared, 0 granted [read-paths-declared]
       ~/.leviath/runs: NOT granted; glob:~/design-docs/**: NOT granted
`},
		{"machine-wide plus blueprint trust", "[security]\nallow_blueprint_read_paths = true\n",
			`✓ Blueprint 'cto' is valid.
  3 stages, version 1.0.0
  file /agents/cto.toml, installed as 'cto': per-agent grants come from [agent_read_paths.cto]
  NOTE declares [read_paths] (reads outside the run workdir): 2 declared, 2 granted [read-paths-declared]
       ~/.leviath/runs: granted; glob:~/design-docs/**: granted
  NOTE grants given to /agents/cto.toml: ~/.leviath/runs by [security] allow_blueprint_read_paths; glob:~/design-docs/** by [security] allow_blueprint_read_paths [read-paths-granted]
`},
		{"a grant for another agent does not count", "[agent_read_paths.other]\nallow = [\"~/.leviath/runs\", \"glob:~/design-docs/**\"]\n[security]\nread_paths = [\"~/.leviath/runs/\"]\n",
			`✓ Blueprint 'cto' is valid.
  3 stages, version 1.0.0
  file /agents/cto.toml, installed as 'cto': per-agent grants come from [agent_read_paths.cto]
  WARN your config does not grant glob:~/design-docs/**: reads matching them will be refused [read-paths-not-granted]
       add to your config.toml: [agent_read_paths.cto] allow = ["glob:~/design-docs/**"]
  NOTE declares [read_paths] (reads outside the run workdir): 2 declared, 1 granted [read-paths-declared]
       ~/.leviath/runs: granted; glob:~/design-docs/**: NOT granted
  NOTE grants given to /agents/cto.toml: ~/.leviath/runs by [security] read_paths [read-paths-granted]
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := levconfig.Parse("config.toml", []byte(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			if got := ValidateReport(bp, cfg); got != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

// TestBinary drives the real lev binary: serve refuses without a token or on a
// non-loopback address; run starts the daemon, completes a run, ps lists it.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	levHome := filepath.Join(root, "lev")
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "LEV_HOME=" + levHome}

	_, stderr, code := runLev(t, bin, base, "serve")
	if code != 2 || !strings.Contains(stderr, "refusing to start without a bearer token") {
		t.Fatalf("serve without token: %d %s", code, stderr)
	}
	_, stderr, code = runLev(t, bin, append(base, "LEV_TOKEN=0123456789abcdef0123"), "serve", "--listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(stderr, "is not loopback") {
		t.Fatalf("serve on 0.0.0.0: %d %s", code, stderr)
	}
	os.MkdirAll(levHome, 0o700)
	os.WriteFile(filepath.Join(levHome, "token"), []byte("0123456789abcdef0123\n"), 0o644)
	_, stderr, code = runLev(t, bin, base, "serve")
	if code != 2 || !strings.Contains(stderr, "has mode 0644; a private file must be mode 0600") {
		t.Fatalf("serve with a world-readable token: %d %s", code, stderr)
	}
	os.Remove(filepath.Join(levHome, "token"))

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	script := filepath.Join(root, "script.toml")
	mustWrite(t, script, `
[[rule]]
stage = "build"
turn = 1
[[rule.call]]
tool = "shell"
args = '{"command": "echo built > built.txt && cat built.txt"}'
[[rule]]
stage = "read"
turn = 1
[[rule.call]]
tool = "read_file"
args = '{"path": "`+filepath.Join(root, "docs", "plan.md")+`"}'
[[rule]]
turn = 2
[[rule.call]]
tool = "submit_output"
args = '{"output": "{{last}}"}'
`)
	mustWrite(t, filepath.Join(root, "docs", "plan.md"), "the plan")
	mustWrite(t, filepath.Join(levHome, "agents", "reader.toml"), "name = \"reader\"\nversion = \"1\"\n[read_paths]\nallow = [\"~/docs\"]\n[stages.read]\ntools = [\"read_file\", \"submit_output\"]\n")
	mustWrite(t, filepath.Join(levHome, "config.toml"), "[daemon]\nlisten = \""+addr+"\"\n[provider]\nkind = \"scripted\"\nscript = \""+script+"\"\n")
	mustWrite(t, filepath.Join(levHome, "agents", "builder.toml"), "name = \"builder\"\nversion = \"2.0.0\"\n[stages.build]\ntools = [\"shell\", \"submit_output\"]\n")
	wd := filepath.Join(root, "wd")
	os.MkdirAll(wd, 0o755)
	t.Cleanup(func() { stopDaemon(filepath.Join(levHome, "daemon.pid")) })

	out, _, code := runLev(t, bin, base, "validate", "builder")
	if code != 0 || out != "✓ Blueprint 'builder' is valid.\n  1 stage, version 2.0.0\n  file "+filepath.Join(levHome, "agents", "builder.toml")+", installed as 'builder': per-agent grants come from [agent_read_paths.builder]\n" {
		t.Fatalf("validate: %d %q", code, out)
	}
	// Headless, shell asks: the model sees the refusal; the scripted model then submits it.
	out, stderr, code = runLev(t, bin, base, "run", "builder", "--workdir", wd)
	if code != 0 || !strings.Contains(stderr, "starting the daemon") || !strings.Contains(out, `permission is "ask"`) {
		t.Fatalf("run without --allow: %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	if st, err := os.Stat(filepath.Join(levHome, "token")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	out, stderr, code = runLev(t, bin, base, "run", "builder", "--workdir", wd, "--allow", "shell")
	if code != 0 || strings.Contains(stderr, "starting the daemon") || !strings.Contains(out, "exit code 0") || !strings.Contains(out, "built") {
		t.Fatalf("run --allow shell: %d\nstdout %s\nstderr %s", code, out, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "built.txt")); string(b) != "built\n" {
		t.Fatalf("built.txt %q", b)
	}
	out, _, code = runLev(t, bin, base, "ps")
	if code != 0 || strings.Count(out, "builder") != 2 || strings.Count(out, "completed") != 2 {
		t.Fatalf("ps: %d\n%s", code, out)
	}
	// Refused for a missing grant; the grant lands in config.toml; lev resume completes it.
	// --yolo: the taint gate (linked into the binary) would otherwise block submitting
	// Private data with nobody to ask; --yolo waives and audits it, and lifts no fence.
	_, stderr, code = runLev(t, bin, base, "run", "reader", "--workdir", wd, "--yolo")
	if code != 1 || !strings.Contains(stderr, "WARN your config does not grant ~/docs") || !strings.Contains(stderr, "lev resume r-") {
		t.Fatalf("run reader: %d\n%s", code, stderr)
	}
	id := stderr[strings.Index(stderr, "lev resume r-")+len("lev resume "):]
	id = id[:strings.IndexAny(id, ") \n")]
	cfgFile := filepath.Join(levHome, "config.toml")
	old, _ := os.ReadFile(cfgFile)
	mustWrite(t, cfgFile, string(old)+"[agent_read_paths.reader]\nallow = [\"~/docs\"]\n")
	out, stderr, code = runLev(t, bin, base, "resume", id)
	if code != 0 || out != "the plan\n" {
		t.Fatalf("resume %s: %d\nstdout %s\nstderr %s", id, code, out, stderr)
	}
	_, stderr, code = runLev(t, bin, base, "policy", "list")
	if code != 2 && code != 0 {
		t.Fatalf("policy: %d %s", code, stderr)
	}
}

func TestWarnUngranted(t *testing.T) {
	var b bytes.Buffer
	warnUngranted(&b, &runner.Record{Agent: "cto", ReadPaths: []runner.ReadPathStatus{
		{Entry: "~/.leviath/runs", Granted: true}, {Entry: "glob:~/design-docs/**"}}})
	want := "lev: WARN your config does not grant glob:~/design-docs/**: reads matching them will be refused [read-paths-not-granted]\n" +
		"       add to your config.toml: [agent_read_paths.cto] allow = [\"glob:~/design-docs/**\"]\n"
	if b.String() != want {
		t.Fatalf("got %q", b.String())
	}
	b.Reset()
	warnUngranted(&b, &runner.Record{Agent: "cto", ReadPaths: []runner.ReadPathStatus{{Entry: "~/x", Granted: true}}})
	if b.Len() != 0 {
		t.Fatalf("warned with everything granted: %q", b.String())
	}
}
