package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinaryExitStatuses pins what the real lev binary prints and the status it exits
// with for each kind of failure, now that every status goes through internal/exitcode
// (a plain error exits 2; only 1 is wrapped). Each row's stderr is the whole of it: one
// "lev: " line, never the message twice, never an "exit status" line of its own. The
// rows were captured from the binary before the change and are identical; the 0 rows are
// the controls (same box, same config: the commands work when nothing is wrong). No row
// starts a daemon.
func TestBinaryExitStatuses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	home := filepath.Join(root, "lev")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing answers here
	mustWrite(t, filepath.Join(home, "config.toml"), "[daemon]\nlisten = \""+addr+"\"\n")
	mustWrite(t, filepath.Join(home, "agents", "bad.toml"), "name = \"bad\"\nversion = \"1\"\n[stages.s]\ntools = [\"nosuchtool\"]\n")
	mustWrite(t, filepath.Join(home, "agents", "ok.toml"), "name = \"ok\"\nversion = \"1\"\n[stages.s]\nprompt = \"p\"\ntools = [\"read_file\"]\n")
	pol := filepath.Join(root, "pol.toml")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "LEV_HOME=" + home}
	noToken := "no bearer token: set LEV_TOKEN or write one to ROOT/lev/token (open ROOT/lev/token: no such file or directory)"
	cases := []struct {
		name  string
		token bool
		args  []string
		code  int
		err   string // the one stderr line after "lev: ", ROOT for the box; "" = silent
	}{
		{"unknown command", false, []string{"nosuchcmd"}, 2, `unknown command "nosuchcmd" for "lev"`},
		{"ps without a token", false, []string{"ps"}, 2, noToken},
		{"logs without a token", false, []string{"logs", "r-none"}, 2, noToken},
		{"result without a token", false, []string{"result", "r-none"}, 2, noToken},
		{"ps with no daemon", true, []string{"ps"}, 2, "no lev daemon answers at " + addr + " (start one with lev serve): "},
		{"invalid blueprint", false, []string{"validate", "bad"}, 1, "blueprint bad is invalid"},
		{"control: valid blueprint", false, []string{"validate", "ok"}, 0, ""},
		{"unknown agent", false, []string{"validate", "missing"}, 2, `no blueprint for agent "missing" in ROOT/lev/agents (want missing.toml or missing/blueprint.toml), nor in the tree (ROOT/lev/.lev/agents/missing.toml)`},
		{"control: policy list", false, []string{"policy", "list", "--policy", pol}, 0, ""},
		{"bad --taint", false, []string{"policy", "test", "shell", "--taint", "secret", "--policy", pol}, 2, `--taint: unknown sensitivity "secret" (want public, internal or private)`},
		{"missing required flag", false, []string{"policy", "add", "shell", "--target", "x", "--policy", pol}, 2, `required flag(s) "max-sensitivity" not set`},
		{"bad tool name", false, []string{"policy", "add", `bad"name`, "--max-sensitivity", "private", "--policy", pol}, 2, `tool name "bad\"name" is not valid`},
		{"bench serve without a socket", false, []string{"bench", "serve"}, 2, "bench serve: --socket PATH is required"},
		{"mcp test of an unknown server", false, []string{"mcp", "test", "nosuch"}, 2, "config.toml has no [mcp.servers.nosuch] (lev mcp list shows the servers)"},
		{"control: mcp list", false, []string{"mcp", "list", "--no-start"}, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			os.Remove(filepath.Join(home, "token"))
			if c.token {
				if err := os.WriteFile(filepath.Join(home, "token"), []byte(levToken+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, stderr, code := runLevIn(t, bin, home, env, c.args...)
			stderr = strings.ReplaceAll(stderr, root, "ROOT")
			want := ""
			if c.err != "" {
				want = "lev: " + c.err
			}
			got := strings.TrimSuffix(stderr, "\n")
			match := got == want
			if strings.HasSuffix(c.err, ": ") { // the dial error after it is the kernel's
				match = strings.HasPrefix(got, want) && !strings.Contains(got, "\n")
			}
			if code != c.code || !match {
				t.Fatalf("lev %s: exit %d, stderr %q; want exit %d, stderr %q", strings.Join(c.args, " "), code, got, c.code, want)
			}
		})
	}
}
