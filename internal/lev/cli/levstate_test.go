package cli

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// levBox is one lev installation driven through the real binary: its own LEV_HOME, config,
// daemon (started by lev run) and workdir.
type levBox struct {
	t                          *testing.T
	bin, root, home, wd, addr  string
	script, cfgFile, tokenFile string
	env                        []string
	dir                        string // the directory lev commands run in
}

const levToken = "levstate-token-0123456789abcdef"

// newBox lays out a box. levHome is LEV_HOME as given to lev (maybe relative to root, or
// inside the workdir); config is appended to the listen and provider lines.
func newBox(t *testing.T, bin, levHome, config string, extraEnv ...string) *levBox {
	t.Helper()
	root, _ := filepath.EvalSymlinks(t.TempDir())
	b := &levBox{t: t, bin: bin, root: root, wd: filepath.Join(root, "wd"), dir: root}
	b.home = levHome
	if !filepath.IsAbs(levHome) {
		b.home = filepath.Join(root, levHome)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	b.addr = ln.Addr().String()
	ln.Close()
	b.script = filepath.Join(root, "script.toml")
	b.cfgFile = filepath.Join(b.home, "config.toml")
	b.tokenFile = filepath.Join(b.home, "token")
	mustWrite(t, filepath.Join(b.wd, "notes.txt"), "notes content")
	mustWrite(t, b.cfgFile, "[daemon]\nlisten = \""+b.addr+"\"\n[provider]\nkind = \"scripted\"\nscript = \""+b.script+"\"\n"+config)
	os.MkdirAll(b.home, 0o700)
	if err := os.WriteFile(b.tokenFile, []byte(levToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "LEV_HOME=" + levHome,
		"LEVTEST_VISIBLE=yes"}, extraEnv...)
	t.Cleanup(b.stop)
	return b
}

func (b *levBox) stop() { stopDaemon(filepath.Join(b.home, "daemon.pid")) }

func (b *levBox) lev(args ...string) (string, string, int) {
	b.t.Helper()
	return runLevIn(b.t, b.bin, b.dir, b.env, args...)
}

func (b *levBox) agent(name, text string) {
	mustWrite(b.t, filepath.Join(b.home, "agents", name+".toml"), text)
}

// probeCall scripts one tool call in stage "probe", then submits what it returned.
func probeCall(tool, args string) string {
	return "[[rule]]\nstage = \"probe\"\nturn = 1\n[[rule.call]]\ntool = \"" + tool + "\"\nargs = '" + args + "'\n" +
		"[[rule]]\nstage = \"probe\"\nturn = 2\n[[rule.call]]\ntool = \"submit_output\"\nargs = '{\"output\": \"{{last}}\"}'\n"
}

const proberBlueprint = `name = "prober"
version = "1"
[stages.probe]
tools = ["read_file", "list_dir", "write_file", "shell", "submit_output"]
`

// TestSeedScriptsAnswerToShell: a blueprint's script seed is a shell call at spawn: the
// user's shell permission refuses it (deny, and ask with nobody to answer; --yolo never
// lifts a deny), and an allowed one runs in stage 1's sandbox. Driven through the real
// binary; the marker file tells whether anything ran.
func TestSeedScriptsAnswerToShell(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	hostIface := ""
	if data, err := os.ReadFile("/proc/net/dev"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasSuffix(f[0], ":") && f[0] != "lo:" {
				hostIface = f[0]
				break
			}
		}
	}
	cases := []struct {
		name, config string
		args         []string
		ran          bool
		want         string // in stderr when refused, in the output when run
		notWant      string
	}{
		{"shell deny refuses the spawn", "[tool_permissions]\nshell = \"deny\"\n", nil, false, `seed 1 (script "seed.sh"): shell: refused: [tool_permissions] shell = "deny"`, ""},
		{"--yolo does not lift a deny", "[tool_permissions]\nshell = \"deny\"\n", []string{"--yolo"}, false, `shell = "deny"`, ""},
		{"ask with nobody to answer refuses", "", nil, false, `seed 1 (script "seed.sh"): shell: refused: permission is "ask"`, ""},
		{"--allow shell lifts the ask", "", []string{"--allow", "shell"}, true, "seeded", ""},
		{"allowed runs (kind none: host network)", "[tool_permissions]\nshell = \"allow\"\n", nil, true, "seeded lo: " + hostIface, ""},
		{"allowed runs in the namespace sandbox", "[tool_permissions]\nshell = \"allow\"\n[sandbox]\nkind = \"namespace\"\nnetwork = false\n", nil, true, "seeded lo:", hostIface},
		{"allowed runs in the blueprint's own sandbox", "[tool_permissions]\nshell = \"allow\"\n", nil, true, "seeded lo:", hostIface},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if hostIface == "" && strings.Contains(tc.name, "network") || hostIface == "" && tc.notWant != "" {
				t.Skip("no host network interface besides lo to tell a network namespace by")
			}
			b := newBox(t, bin, "lev", tc.config)
			mustWrite(t, filepath.Join(b.wd, "seed.sh"), "touch marker; printf 'seeded '; awk 'NR>2 {print $1}' /proc/net/dev | tr '\\n' ' '")
			mustWrite(t, b.script, modelScript("submit-last.toml"))
			bpSandbox := ""
			if strings.Contains(tc.name, "blueprint's own sandbox") {
				bpSandbox = "[sandbox]\nkind = \"namespace\"\nnetwork = false\n"
			}
			b.agent("seeder", "name = \"seeder\"\nversion = \"1\"\n"+bpSandbox+"[[seeds]]\nscript = \"seed.sh\"\n[stages.s]\ntools = [\"submit_output\"]\n")
			out, stderr, code := b.lev(append([]string{"run", "seeder", "--workdir", b.wd}, tc.args...)...)
			_, err := os.Stat(filepath.Join(b.wd, "marker"))
			if ran := err == nil; ran != tc.ran {
				t.Fatalf("seed ran = %v, want %v\nstdout %s\nstderr %s", ran, tc.ran, out, stderr)
			}
			if !tc.ran {
				if code == 0 || !strings.Contains(stderr, tc.want) {
					t.Fatalf("exit %d, stderr %s; want a refusal with %q", code, stderr, tc.want)
				}
				return
			}
			if code != 0 || !strings.Contains(out, tc.want) || (tc.notWant != "" && strings.Contains(out, tc.notWant)) {
				t.Fatalf("exit %d, stdout %s (want %q, not %q), stderr %s", code, out, tc.want, tc.notWant, stderr)
			}
		})
	}
}

// TestAgentCannotReachLevState: with $LEV_HOME inside the workdir (a jail's layout), no
// tool reaches lev's token, config or agents: read_file by every spelling (absolute,
// relative, .., symlink, hard link), list_dir, write_file, and a shell under kinds none
// and namespace (cat, umount, hard links, other processes' environ). Each row has a
// positive control: the same call on an ordinary file in the workdir works.
func TestAgentCannotReachLevState(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	shellProbe := "cat .lev/token; cat $LEV_HOME/token; ls -a .lev; ln .lev/token hl && cat hl; umount .lev; cat .lev/token; " +
		"cat /proc/[0-9]*/environ | tr \"\\\\0\" \"\\\\n\" | grep -a LEV_TOKEN; env | grep LEVTEST_VISIBLE; cat notes.txt"
	type row struct {
		name, tool, args string
		refused          bool   // the call is refused by lev
		want             string // in the output: the refusal, or the positive control
	}
	fileRows := func(wd string) []row {
		return []row{
			{"read_file absolute", "read_file", `{"path": ` + jsonArg(filepath.Join(wd, ".lev", "token")) + `}`, true, "lev's own state"},
			{"read_file relative", "read_file", `{"path": ".lev/token"}`, true, "lev's own state"},
			{"read_file dot-dot", "read_file", `{"path": "sub/../.lev/token"}`, true, "lev's own state"},
			{"read_file symlink", "read_file", `{"path": "link"}`, true, "lev's own state"},
			{"read_file hard link", "read_file", `{"path": "hard"}`, true, "a hard link to"},
			{"read_file config.toml", "read_file", `{"path": ".lev/config.toml"}`, true, "lev's own state"},
			{"list_dir lev home", "list_dir", `{"path": ".lev"}`, true, "lev's own state"},
			{"write_file a blueprint", "write_file", `{"path": ".lev/agents/evil.toml", "content": "name = \"evil\""}`, true, "lev's own state"},
			{"control: read_file beside it", "read_file", `{"path": "sub/../notes.txt"}`, false, "notes content"},
			{"control: list_dir the workdir", "list_dir", `{"path": "."}`, false, "notes.txt"},
		}
	}
	for _, kind := range []string{"none", "namespace"} {
		t.Run("sandbox "+kind, func(t *testing.T) {
			b := newBox(t, bin, "wd/.lev", "[tool_permissions]\nshell = \"allow\"\n[sandbox]\nkind = \""+kind+"\"\n", "LEV_TOKEN="+levToken)
			b.agent("prober", proberBlueprint)
			os.MkdirAll(filepath.Join(b.wd, "sub"), 0o755)
			os.Symlink(filepath.Join(b.home, "token"), filepath.Join(b.wd, "link"))
			if err := os.Link(b.tokenFile, filepath.Join(b.wd, "hard")); err != nil {
				t.Fatal(err)
			}
			rows := []row{{"shell", "shell", `{"command": ` + jsonArg(shellProbe) + `}`, false, "LEVTEST_VISIBLE=yes"}}
			if kind == "none" {
				rows = append(fileRows(b.wd), rows...)
			}
			// Once the daemon runs: its /proc entries (root/, environ, fd/) and its API
			// without the token. The 401 is the control that the API was reached.
			daemonRow := func() row {
				pid, _ := os.ReadFile(filepath.Join(b.home, "daemon.pid"))
				p := "/proc/" + strings.TrimSpace(string(pid))
				cmd := "cat " + p + "/root" + b.tokenFile + " " + p + "/environ " + p + "/fd/* 2>&1 | head -c 2000; ls /proc | tr \"\\n\" \" \"; echo; " +
					"curl -s -o /dev/null -w \"api %{http_code}\" http://" + b.addr + "/api/agents; echo; cat notes.txt"
				return row{"shell: the daemon's /proc and API", "shell", `{"command": ` + jsonArg(cmd) + `}`, false, "api 401"}
			}
			for i := 0; i <= len(rows); i++ {
				var r row
				if i == len(rows) {
					r = daemonRow()
				} else {
					r = rows[i]
				}
				mustWrite(t, b.script, probeCall(r.tool, r.args))
				out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
				if code != 0 {
					t.Fatalf("%s: exit %d\nstdout %s\nstderr %s", r.name, code, out, stderr)
				}
				if strings.Contains(out, levToken) || strings.Contains(stderr, levToken) {
					t.Fatalf("%s: the token reached the agent:\n%s", r.name, out)
				}
				if !strings.Contains(out, r.want) {
					t.Fatalf("%s: output lacks %q:\n%s", r.name, r.want, out)
				}
				if r.tool == "shell" {
					t.Logf("%s: %s", r.name, out)
				}
				if r.tool == "shell" && !strings.Contains(out, "notes content") {
					t.Fatalf("shell: the control read of notes.txt failed:\n%s", out)
				}
			}
			if _, err := os.Stat(filepath.Join(b.home, "agents", "evil.toml")); err == nil {
				t.Fatal("write_file created a blueprint in lev's agents directory")
			}
			if data, _ := os.ReadFile(b.tokenFile); strings.TrimSpace(string(data)) != levToken {
				t.Fatalf("token file changed: %q", data)
			}
		})
	}
	t.Run("token file and TLS key outside LEV_HOME, under a granted read path", func(t *testing.T) {
		b := newBox(t, bin, "lev", "")
		keys := filepath.Join(b.root, "keys")
		mustWrite(t, filepath.Join(keys, "client.key"), "TLS-KEY-SECRET")
		mustWrite(t, filepath.Join(keys, "client.pem"), "cert")
		mustWrite(t, filepath.Join(keys, "other.txt"), "other content")
		old, _ := os.ReadFile(b.cfgFile)
		cfg := strings.Replace(string(old), "[provider]\n", "[provider]\ntls_cert = \""+filepath.Join(keys, "client.pem")+"\"\ntls_key = \""+filepath.Join(keys, "client.key")+"\"\n", 1)
		mustWrite(t, b.cfgFile, "[daemon]\ntoken_file = \""+filepath.Join(keys, "token")+"\"\n"+strings.Replace(cfg, "[daemon]\n", "", 1)+
			"[agent_read_paths.prober]\nallow = [\"~/keys\"]\n")
		b.agent("prober", strings.Replace(proberBlueprint, "[stages.probe]", "[read_paths]\nallow = [\"~/keys\"]\n[stages.probe]", 1))
		for _, r := range []row{
			{"read the token", "read_file", `{"path": "~/keys/token"}`, true, "lev's own state"},
			{"read the TLS key", "read_file", `{"path": "~/keys/client.key"}`, true, "lev's own state"},
			{"control: read beside them", "read_file", `{"path": "~/keys/other.txt"}`, false, "other content"},
		} {
			mustWrite(t, b.script, probeCall(r.tool, strings.Replace(r.args, "~", b.root, 1)))
			out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
			tok, _ := os.ReadFile(filepath.Join(keys, "token"))
			if code != 0 || !strings.Contains(out, r.want) || len(tok) < 16 || strings.Contains(out, strings.TrimSpace(string(tok))) || strings.Contains(out, "TLS-KEY-SECRET") {
				t.Fatalf("%s: exit %d\nstdout %s\nstderr %s", r.name, code, out, stderr)
			}
		}
	})
	t.Run("a worker's lev home named in LEV_PROTECT", func(t *testing.T) {
		// lever's manager mounts the tree with each worker's $LEV_HOME in it. Without
		// LEV_PROTECT the manager's tools could write a worker's config.toml (the control
		// row); with it, nothing reaches it, shell included.
		for _, protect := range []bool{false, true} {
			var extra []string
			if protect {
				extra = []string{"LEV_PROTECT=wd/worker/.lev"} // relative: pinned at start
			}
			b := newBox(t, bin, "lev", "[tool_permissions]\nshell = \"allow\"\n", extra...)
			b.agent("prober", proberBlueprint)
			mustWrite(t, filepath.Join(b.wd, "worker", ".lev", "config.toml"), "WORKER-CONFIG")
			mustWrite(t, filepath.Join(b.wd, "worker", "notes.txt"), "worker notes")
			rows := []row{
				{"read the worker's config", "read_file", `{"path": "worker/.lev/config.toml"}`, protect, "lev's own state"},
				{"shell reads the worker's config", "shell", `{"command": "cat worker/.lev/config.toml; cat worker/notes.txt"}`, false, "worker notes"},
				{"write the worker's config", "write_file", `{"path": "worker/.lev/config.toml", "content": "[tool_permissions]"}`, protect, "lev's own state"},
			}
			for _, r := range rows {
				mustWrite(t, b.script, probeCall(r.tool, r.args))
				out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
				if code != 0 {
					t.Fatalf("%s: exit %d\n%s\n%s", r.name, code, out, stderr)
				}
				leaked := strings.Contains(out, "WORKER-CONFIG")
				if protect && (leaked || !strings.Contains(out, r.want)) {
					t.Fatalf("protected, %s: %s", r.name, out)
				}
				if !protect && r.tool == "read_file" && !leaked {
					t.Fatalf("control, %s: the unprotected read did not reach the file: %s", r.name, out)
				}
			}
			data, _ := os.ReadFile(filepath.Join(b.wd, "worker", ".lev", "config.toml"))
			if written := string(data) == "[tool_permissions]"; written == protect {
				t.Fatalf("LEV_PROTECT=%v: worker config is %q", protect, data)
			}
		}
	})
	t.Run("relative LEV_HOME", func(t *testing.T) {
		b := newBox(t, bin, "rel-lev", "")
		b.agent("prober", proberBlueprint)
		b.wd = b.root // the workdir holds the relative home
		mustWrite(t, filepath.Join(b.wd, "notes.txt"), "notes content")
		for _, r := range []row{
			{"read the token", "read_file", `{"path": "rel-lev/token"}`, true, "lev's own state"},
			{"write config.toml", "write_file", `{"path": "rel-lev/config.toml", "content": "x"}`, true, "lev's own state"},
			{"control", "read_file", `{"path": "notes.txt"}`, false, "notes content"},
		} {
			mustWrite(t, b.script, probeCall(r.tool, r.args))
			out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
			if code != 0 || !strings.Contains(out, r.want) || strings.Contains(out, levToken) {
				t.Fatalf("%s: exit %d\nstdout %s\nstderr %s", r.name, code, out, stderr)
			}
		}
	})
	t.Run("workdir inside LEV_HOME", func(t *testing.T) {
		b := newBox(t, bin, "lev", "")
		b.agent("prober", proberBlueprint)
		mustWrite(t, b.script, probeCall("read_file", `{"path": "token"}`))
		for _, wd := range []string{b.home, filepath.Join(b.home, "agents")} {
			_, stderr, code := b.lev("run", "prober", "--workdir", wd, "--yolo")
			if code == 0 || !strings.Contains(stderr, "lies in lev's own state") {
				t.Fatalf("workdir %s: exit %d, %s", wd, code, stderr)
			}
		}
		// Control: the same spawn in an ordinary workdir runs.
		mustWrite(t, filepath.Join(b.wd, "token"), "not lev's")
		out, stderr, code := b.lev("run", "prober", "--workdir", b.wd, "--yolo")
		if code != 0 || !strings.Contains(out, "not lev's") {
			t.Fatalf("control: exit %d\n%s\n%s", code, out, stderr)
		}
	})
}

// TestResumeUsesAdmittedBlueprint: a run resumes under the blueprint it was admitted
// under, never the file as it is now. Rows: the agent rewrites its own blueprint (a file
// in its workdir, as lever's lev.blueprint is), or the agents-directory file changes after
// admission. The run is then refused a read; once the user grants it, lev resume must
// continue with the admitted stage prompt. The control: the edit did reach the file.
func TestResumeUsesAdmittedBlueprint(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	blueprint := func(prompt string) string {
		return "name = \"selfedit\"\nversion = \"1\"\n[read_paths]\nallow = [\"~/docs\"]\n[stages.edit]\ntools = [\"write_file\", \"read_file\", \"submit_output\"]\n" +
			"[stages.report]\nprompt = \"" + prompt + "\"\ntools = [\"submit_output\"]\n"
	}
	for _, inWorkdir := range []bool{true, false} {
		name := "agents directory file edited after admission"
		if inWorkdir {
			name = "blueprint in the workdir rewritten by the agent"
		}
		t.Run(name, func(t *testing.T) {
			b := newBox(t, bin, "lev", "")
			mustWrite(t, filepath.Join(b.root, "docs", "plan.md"), "the plan")
			bpFile, agent := filepath.Join(b.wd, "agent.toml"), filepath.Join(b.wd, "agent.toml")
			if !inWorkdir {
				bpFile, agent = filepath.Join(b.home, "agents", "selfedit.toml"), "selfedit"
			}
			mustWrite(t, bpFile, blueprint("ORIGINAL PROMPT"))
			script := `
[[rule]]
stage = "edit"
turn = 1
[[rule.call]]
tool = "write_file"
args = '{"path": "agent.toml", "content": ` + jsonArg(blueprint("EVIL PROMPT")) + `}'
[[rule.call]]
tool = "write_file"
args = '{"path": "other.toml", "content": ` + jsonArg(blueprint("EVIL PROMPT")) + `}'
[[rule]]
stage = "edit"
turn = 2
[[rule.call]]
tool = "read_file"
args = '{"path": ` + jsonArg(filepath.Join(b.root, "docs", "plan.md")) + `}'
[[rule]]
stage = "edit"
turn = 3
[[rule.call]]
tool = "submit_output"
args = '{"output": "edited"}'
[[rule]]
stage = "report"
turn = 1
[[rule.call]]
tool = "submit_output"
args = '{"output": "{{last}}"}'
`
			// A blueprint file in the workdir is the tree's, somebody else's: no read-path
			// grant ever applies to it, so its read of ~/docs is an outside-the-workdir
			// refusal that does not stop the run. What stops it here is the model (no rule
			// for turn 2 until the resume), so the resume still has to pick a blueprint.
			firstScript := script
			if inWorkdir {
				firstScript = strings.Replace(script, "turn = 2\n", "turn = 99\n", 1)
			}
			mustWrite(t, b.script, firstScript)
			_, stderr, code := b.lev("run", agent, "--workdir", b.wd, "--yolo")
			if code != 1 || (!inWorkdir && !strings.Contains(stderr, "lev resume r-")) || (inWorkdir && !strings.Contains(stderr, "no rule matches")) {
				t.Fatalf("run: exit %d\n%s", code, stderr)
			}
			mustWrite(t, b.script, script)
			if inWorkdir {
				// A blueprint file in the workdir is the tree's: whoever writes the tree could
				// write it, so it is not lev's state and the agent's write_file goes through
				// (the workbench, which shares the tree, could not mask it anyway). What keeps
				// the run honest is the snapshot below and the foreign reading of every run of
				// it (origin "tree": no grant, tighten-only). The control: another name.
				if data, _ := os.ReadFile(bpFile); !strings.Contains(string(data), "EVIL PROMPT") {
					t.Fatalf("the agent's write of its tree blueprint %s did not go through", bpFile)
				}
				if data, _ := os.ReadFile(filepath.Join(b.wd, "other.toml")); !strings.Contains(string(data), "EVIL PROMPT") {
					t.Fatalf("control: write_file of another file in the workdir did not happen: %q", data)
				}
			}
			// The file changes after admission anyway (the user edits it): a resume must
			// still use the snapshot.
			mustWrite(t, bpFile, blueprint("EVIL PROMPT"))
			if data, _ := os.ReadFile(bpFile); !strings.Contains(string(data), "EVIL PROMPT") {
				t.Fatalf("control: the rewrite did not reach %s:\n%s", bpFile, data)
			}
			id := regexpRunID(t, stderr)
			old, _ := os.ReadFile(b.cfgFile)
			// One in the agents directory gets its [agent_read_paths.NAME]; one in the tree
			// gets no grant, but the config still changes (a second config hash).
			grant := "[agent_read_paths.selfedit]\nallow = [\"~/docs\"]\n"
			if inWorkdir {
				grant = "[security]\nread_paths = [\"~/docs\"]\n"
			}
			mustWrite(t, b.cfgFile, string(old)+grant)
			out, stderr, code := b.lev("resume", id)
			if code != 0 || !strings.Contains(out, "ORIGINAL PROMPT") || strings.Contains(out, "EVIL") {
				t.Fatalf("resume %s: exit %d (want the admitted blueprint's prompt)\nstdout %s\nstderr %s", id, code, out, stderr)
			}
			var rec struct {
				Admission struct {
					BlueprintSHA256 string   `json:"blueprint_sha256"`
					ConfigSHA256    string   `json:"config_sha256"`
					ResumeConfigs   []string `json:"resume_config_sha256"`
					Origin          string   `json:"origin"`
				} `json:"admission"`
			}
			data, err := os.ReadFile(filepath.Join(b.home, "runs", id, "run.json"))
			if err == nil {
				err = json.Unmarshal(data, &rec)
			}
			a := rec.Admission
			if wantOrigin := map[bool]string{true: "tree", false: "agents"}[inWorkdir]; a.Origin != wantOrigin {
				t.Fatalf("admission origin %q, want %q", a.Origin, wantOrigin)
			}
			if err != nil || a.BlueprintSHA256 == "" || a.ConfigSHA256 == "" || len(a.ResumeConfigs) != 1 || a.ResumeConfigs[0] == a.ConfigSHA256 {
				t.Fatalf("admission record %+v (%v): want the blueprint hash and two different config hashes", a, err)
			}
		})
	}
}
