package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGrantsKeyedOnInstallName (docs/lev.md, "Blueprints from the tree") drives the real lev binary: config
// grants ~/docs to [agent_read_paths.cto]. A blueprint installed as evil (agents/evil.toml,
// or agents/evil/blueprint.toml) that calls itself "cto" is refused, by lev run and lev
// validate, naming the file; the same blueprint installed as cto (the control) reads the
// file; run by its path from outside the agents directory it gets no per-agent grant.
func TestGrantsKeyedOnInstallName(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	levHome := filepath.Join(root, "lev")
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "LEV_HOME=" + levHome}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	script := filepath.Join(root, "script.toml")
	mustWrite(t, script, `
[[rule]]
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
	mustWrite(t, filepath.Join(root, "docs", "plan.md"), "the cto plan")
	mustWrite(t, filepath.Join(levHome, "config.toml"), "[daemon]\nlisten = \""+addr+"\"\n[provider]\nkind = \"scripted\"\nscript = \""+script+
		"\"\n[agent_read_paths.cto]\nallow = [\"~/docs\"]\n")
	const ctoBP = "name = \"cto\"\nversion = \"1\"\n[read_paths]\nallow = [\"~/docs\"]\n[stages.read]\ntools = [\"read_file\", \"submit_output\"]\n"
	wd := filepath.Join(root, "wd")
	os.MkdirAll(wd, 0o755)
	t.Cleanup(func() { stopDaemon(filepath.Join(levHome, "daemon.pid")) })

	for _, tc := range []struct {
		name, file, invoke string
		runCode            int
		runWant            string // in stdout+stderr
		validateCode       int
		validateWant       []string
	}{
		{name: "evil.toml calling itself cto", file: "agents/evil.toml", invoke: "evil",
			runCode: 2, runWant: `calls itself "cto" but is installed as "evil"`,
			validateCode: 1, validateWant: []string{`calls itself "cto" but is installed as "evil"`, "agents/evil.toml"}},
		{name: "evil/blueprint.toml calling itself cto", file: "agents/evil2/blueprint.toml", invoke: "evil2",
			runCode: 2, runWant: `calls itself "cto" but is installed as "evil2"`,
			validateCode: 1, validateWant: []string{`installed as "evil2"`}},
		{name: "control: installed as cto", file: "agents/cto.toml", invoke: "cto",
			runCode: 0, runWant: "the cto plan\n",
			validateCode: 0, validateWant: []string{"file " + filepath.Join(levHome, "agents", "cto.toml") + ", installed as 'cto'",
				"NOTE grants given to " + filepath.Join(levHome, "agents", "cto.toml") + ": ~/docs by [agent_read_paths.cto]"}},
		{name: "run by its path from outside the agents dir", file: "downloads/cto.toml", invoke: filepath.Join(root, "downloads", "cto.toml"),
			runCode: 1, runWant: `add to your config.toml: [security] read_paths = ["~/docs"]`,
			validateCode: 0, validateWant: []string{"not installed in the agents directory", `add to your config.toml: [security] read_paths = ["~/docs"]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(levHome, tc.file)
			if strings.HasPrefix(tc.file, "downloads/") {
				p = filepath.Join(root, tc.file)
			}
			mustWrite(t, p, ctoBP)
			t.Cleanup(func() { os.Remove(p) })
			// --yolo: the grant's read is Private and the gate would block submitting it with
			// nobody to ask; --yolo lifts no grant or fence, which is what is tested here.
			out, stderr, code := runLev(t, bin, base, "run", tc.invoke, "--workdir", wd, "--yolo")
			if code != tc.runCode || !strings.Contains(out+stderr, tc.runWant) {
				t.Fatalf("lev run %s: exit %d (want %d)\nstdout %s\nstderr %s\nwant %q", tc.invoke, code, tc.runCode, out, stderr, tc.runWant)
			}
			if tc.runCode != 0 && strings.Contains(out, "the cto plan") {
				t.Fatalf("lev run %s read cto's granted file: %s", tc.invoke, out)
			}
			out, _, code = runLev(t, bin, base, "validate", tc.invoke)
			if code != tc.validateCode {
				t.Fatalf("lev validate %s: exit %d, want %d\n%s", tc.invoke, code, tc.validateCode, out)
			}
			for _, w := range tc.validateWant {
				if !strings.Contains(out, w) {
					t.Errorf("lev validate %s lacks %q:\n%s", tc.invoke, w, out)
				}
			}
		})
	}
}
