package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestReadPathAttacksBinary drives the built lev through `lev validate` and `lev run`
// with blueprints whose [read_paths] entries were read one way when granting and another
// when enforcing (docs/lev.md, "The read-path fence"). Each attack reads a file the user never meant to
// open; each has a positive control in the same daemon that reads through a sound entry,
// so a refusal is the fence's doing and not a broken setup.
func TestReadPathAttacksBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home := filepath.Join(root, "home")
	for p, c := range map[string]string{
		"victim/secret.txt":   "VICTIM-SECRET",   // outside the home: what ~/../victim reached
		"home/victim/ok.txt":  "HOME-VICTIM-OK",  // what granting ~/victim meant
		"home/pub/ab.txt":     "PUBLIC-AB",       // what glob:~/pub/a[!x]* means
		"home/pub/a/secret":   "PUB-A-SECRET",    // what [!x] matching "/" reached
		"home/pub/ax/nothing": "never read here", // keeps pub/ax a directory
	} {
		mustWrite(t, filepath.Join(root, p), c)
	}
	secret := filepath.Join(root, "victim", "secret.txt")
	wd := filepath.Join(root, "wd") // everything read here is outside it
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "script.toml")
	var sb strings.Builder
	for stage, target := range map[string]string{
		"outside": secret,
		"homeok":  filepath.Join(home, "victim", "ok.txt"),
		"deep":    filepath.Join(home, "pub", "a", "secret"),
		"shallow": filepath.Join(home, "pub", "ab.txt"),
	} {
		sb.WriteString("[[rule]]\nstage = \"" + stage + "\"\nturn = 1\n[[rule.call]]\ntool = \"read_file\"\nargs = '{\"path\": \"" + target + "\"}'\n")
	}
	sb.WriteString("[[rule]]\nturn = 2\n[[rule.call]]\ntool = \"submit_output\"\nargs = '{\"output\": \"{{last}}\"}'\n")
	mustWrite(t, script, sb.String())

	escape := "regex:" + home + "/pub/a)|(.*secret.txt"
	agents := map[string]struct{ entry, stage string }{
		"dotdot":    {"~/../victim", "outside"},                     // granted as ~/victim, read as home/../victim
		"homeok":    {"~/victim", "homeok"},                         // control: the same grant, spelled soundly
		"escape":    {escape, "outside"},                            // ")" closed the anchoring group
		"nearall":   {"regex:/[^x].*", "outside"},                   // passed the four-path sample
		"nearglob":  {"glob:/*/**", "outside"},                      // passed the four-path sample
		"classes":   {"glob:~/pub/a[!x]*", "deep"},                  // [!x] matched "/"
		"classesok": {"glob:~/pub/a[!x]*", "shallow"},               // control: the entry's real reach
		"regexok":   {"regex:" + home + "/pub/ab\\.txt", "shallow"}, // control for the regex rows
		"homeabs":   {home, "homeok"},                               // the home spelled absolutely: its whole subtree
	}
	daemon := func(name, grants string) []string {
		lh := filepath.Join(root, name)
		env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LEV_HOME=" + lh}
		for a, v := range agents {
			mustWrite(t, filepath.Join(lh, "agents", a+".toml"), "name = \""+a+"\"\nversion = \"1\"\n[read_paths]\nallow = ["+strconv.Quote(v.entry)+"]\n[stages."+v.stage+"]\ntools = [\"read_file\", \"submit_output\"]\n")
		}
		ln := freeAddr(t)
		mustWrite(t, filepath.Join(lh, "config.toml"), "[daemon]\nlisten = \""+ln+"\"\n[provider]\nkind = \"scripted\"\nscript = "+strconv.Quote(script)+"\n"+grants)
		t.Cleanup(func() { stopDaemon(filepath.Join(lh, "daemon.pid")) })
		return env
	}
	// Home A grants entries one agent at a time, as the user would copy them from
	// lev validate; home B trusts every declaration, the attacker's best case.
	envA := daemon("levA", `
[agent_read_paths.dotdot]
allow = ["~/victim"]
[agent_read_paths.homeok]
allow = ["~/victim"]
[agent_read_paths.classes]
allow = ["glob:~/pub/a[!x]*"]
[agent_read_paths.classesok]
allow = ["glob:~/pub/a[!x]*"]
`)
	envB := daemon("levB", "[security]\nallow_blueprint_read_paths = true\n")

	refusedAtParse := map[string][]string{
		"dotdot":   {`read path "~/../victim": a path cannot contain ".."`},
		"escape":   {`read path "` + escape + `": bad regex: error parsing regexp: unexpected )`},
		"nearall":  {`read path "regex:/[^x].*": a catch-all regex is refused`},
		"nearglob": {`read path "glob:/*/**": a catch-all glob is refused`},
		// Only the real home says this one is too broad: validate checks against it, the
		// run when it binds the fence.
		"homeabs": {`read path "` + home + `" (home ` + home, `: it reaches the whole home directory`},
	}
	cases := []struct {
		name, agent string
		env         []string
		want        string // in the run's output; empty: refused before it starts
		leak        string // must never appear
	}{
		{"~/../X granted as ~/X", "dotdot", envA, "", "VICTIM-SECRET"},
		{"control: ~/X granted as ~/X", "homeok", envA, "HOME-VICTIM-OK", "VICTIM-SECRET"},
		{"[!x] class across /", "classes", envA, "is outside the workdir and no declared [read_paths] entry covers it", "PUB-A-SECRET"},
		{"control: [!x] class within a component", "classesok", envA, "PUBLIC-AB", "PUB-A-SECRET"},
		{"regex ) escaping the anchors", "escape", envB, "", "VICTIM-SECRET"},
		{"regex near-catch-all", "nearall", envB, "", "VICTIM-SECRET"},
		{"glob near-catch-all", "nearglob", envB, "", "VICTIM-SECRET"},
		{"control: anchored regex", "regexok", envB, "PUBLIC-AB", "VICTIM-SECRET"},
		{"the home spelled absolutely", "homeabs", envB, "", "HOME-VICTIM-OK"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vout, _, vcode := runLev(t, bin, tc.env, "validate", tc.agent)
			out, stderr, code := runLev(t, bin, tc.env, "run", tc.agent, "--workdir", wd, "--yolo")
			if strings.Contains(out+stderr+vout, tc.leak) {
				t.Fatalf("leaked %s:\nvalidate %s\nrun %s\n%s", tc.leak, vout, out, stderr)
			}
			if frags, bad := refusedAtParse[tc.agent]; bad {
				if vcode != 1 || !strings.Contains(vout, "✗ Blueprint '"+tc.agent+"' is invalid") {
					t.Fatalf("validate: exit %d\n%s", vcode, vout)
				}
				for _, frag := range frags {
					if !strings.Contains(vout, frag) {
						t.Fatalf("validate:\n%s\nwant it to name the entry: %s", vout, frag)
					}
					if code == 0 || !strings.Contains(stderr, frag) {
						t.Fatalf("run: exit %d\nstdout %s\nstderr %s\nwant a refusal naming the entry: %s", code, out, stderr, frag)
					}
				}
				t.Logf("validate: %s\nrun: %s", vout, stderr)
				return
			}
			if vcode != 0 || !strings.Contains(vout, "1 declared, 1 granted") {
				t.Fatalf("validate: exit %d\n%s", vcode, vout)
			}
			if code != 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("run: exit %d\nstdout %s\nstderr %s\nwant %s", code, out, stderr, tc.want)
			}
		})
	}

	// The grant side: a config that grants a bad entry is refused, naming the key, line
	// and entry, so no daemon ever runs with it.
	envC := daemon("levC", "[agent_read_paths.escape]\nallow = ["+strconv.Quote(escape)+"]\n")
	_, stderr, code := runLev(t, bin, envC, "validate", "homeok")
	if code != 2 || !strings.Contains(stderr, `key "agent_read_paths.escape.allow": entry 1: read path "`+escape+`": bad regex`) {
		t.Fatalf("validate with a bad grant: exit %d\n%s", code, stderr)
	}
}
