package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLevStateThroughAnotherMount: lev's home visible a second time through a bind mount
// (a home directory or volume mounted twice) is the same state under a path symlink
// resolution cannot tie to it. Through the real binary, run inside a mount namespace the
// test makes (lev run and the daemon it starts both live in it), with LEV_HOME bound at
// wd/alias: the file tools must refuse it (a blueprint written into the agents directory
// would be loaded by a later run) and the shell must not read the token. Control: another
// directory bound the same way at wd/other is read by both, so the bind itself works.
func TestLevStateThroughAnotherMount(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to make a mount namespace") // CI runs as root
	}
	bin := buildLev(t)
	b := newBox(t, bin, "home", "[tool_permissions]\nshell = \"allow\"\n")
	b.agent("prober", proberBlueprint)
	other := filepath.Join(b.root, "otherdir")
	mustWrite(t, filepath.Join(other, "o.txt"), "other content")
	os.MkdirAll(filepath.Join(b.wd, "alias"), 0o755)
	os.MkdirAll(filepath.Join(b.wd, "other"), 0o755)
	run := func(t *testing.T) (string, string) {
		t.Helper()
		script := "mount --bind " + b.home + " " + filepath.Join(b.wd, "alias") + " && mount --bind " + other + " " + filepath.Join(b.wd, "other") + ` && exec "$0" "$@"`
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, b.bin, "run", "prober", "--workdir", b.wd, "--yolo")
		cmd.Env, cmd.Dir = b.env, b.dir
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v\nstdout %s\nstderr %s", err, out.String(), errb.String())
		}
		b.stop() // the next row starts its own daemon in its own namespace
		return out.String(), errb.String()
	}
	for _, r := range []struct {
		name, tool, args, want string
	}{
		{"write_file a blueprint through the alias", "write_file", `{"path": "alias/agents/evil.toml", "content": "name = \"evil\""}`, "lev's own state"},
		{"read_file config through the alias", "read_file", `{"path": "alias/config.toml"}`, "lev's own state"},
		{"list_dir the alias", "list_dir", `{"path": "alias/agents"}`, "lev's own state"},
		{"shell reads the token through the alias", "shell", `{"command": "cat alias/token; cat other/o.txt"}`, "other content"},
		{"control: read_file through the other bind", "read_file", `{"path": "other/o.txt"}`, "other content"},
	} {
		t.Run(r.name, func(t *testing.T) {
			mustWrite(t, b.script, probeCall(r.tool, r.args))
			out, stderr := run(t)
			if strings.Contains(out, levToken) || !strings.Contains(out, r.want) {
				t.Fatalf("want %q and no token\nstdout %s\nstderr %s", r.want, out, stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(b.home, "agents", "evil.toml")); err == nil {
		t.Fatal("a blueprint was written into lev's agents directory through the alias")
	}
}
