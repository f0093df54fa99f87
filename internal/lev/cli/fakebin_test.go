package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFakeUnshareOnWritablePath: the daemon found unshare (and sh, and the container
// engine) on its PATH, and a PATH directory lev's user can write (~/.local/bin is first on
// Debian's default PATH) is one a shell command writes too. A command that drops a fake
// unshare there has the next command run with nothing masked. Through the real binary,
// run as an unprivileged user (nobody) with kind none: turn 1 plants the fake, turn 2 is
// an ordinary command. The fake copies the token to a file if it ever runs. Control: the
// fake is executable and is what the daemon's PATH names first for unshare.
func TestFakeUnshareOnWritablePath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to run lev as another user") // CI runs as root
	}
	bin := buildLev(t)
	b := newBox(t, bin, "lev", "[tool_permissions]\nshell = \"allow\"\n")
	b.agent("prober", proberBlueprint)
	userBin := filepath.Join(b.root, ".local", "bin")
	os.MkdirAll(userBin, 0o755)
	levBin := filepath.Join(b.root, "lev-bin")
	data, _ := os.ReadFile(bin)
	if err := os.WriteFile(levBin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	stolen := filepath.Join(b.root, "stolen")
	fake := "#!/bin/sh\ncase \"$*\" in *lev-mask-probe*) exec /usr/bin/unshare \"$@\";; esac\ncat " + b.tokenFile + " >> " + stolen + " 2>&1\nexec /usr/bin/unshare \"$@\"\n"
	plant := "printf %s " + shellQuote(fake) + " > " + userBin + "/unshare && chmod 755 " + userBin + "/unshare && echo planted"
	mustWrite(t, b.script, "[[rule]]\nstage = \"probe\"\nturn = 1\n[[rule.call]]\ntool = \"shell\"\nargs = '''{\"command\": "+jsonArg(plant)+"}'''\n"+
		"[[rule]]\nstage = \"probe\"\nturn = 2\n[[rule.call]]\ntool = \"shell\"\nargs = '{\"command\": \"cat notes.txt\"}'\n"+
		"[[rule]]\nstage = \"probe\"\nturn = 3\n[[rule.call]]\ntool = \"submit_output\"\nargs = '{\"output\": \"{{last}}\"}'\n")
	// Everything the daemon needs belongs to nobody; the test directories above are opened.
	for d := b.root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	if out, err := exec.Command("chown", "-R", "65534:65534", b.root).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	path := userBin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	env := append(b.env[:len(b.env):len(b.env)], "PATH="+path)
	cmd := exec.Command(levBin, "run", "prober", "--workdir", b.wd, "--yolo")
	cmd.Env, cmd.Dir = env, b.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if got, _ := os.ReadFile(stolen); strings.Contains(string(got), levToken) {
		t.Fatalf("the fake unshare ran and read the token:\n%s\n%s", out.String(), errb.String())
	}
	if err != nil || !strings.Contains(out.String(), "notes content") {
		t.Fatalf("run: %v\nstdout %s\nstderr %s", err, out.String(), errb.String())
	}
	// Control: the fake is there, executable, and first on the daemon's PATH.
	look := exec.Command("sh", "-c", "command -v unshare")
	look.Env = []string{"PATH=" + path}
	if where, _ := look.Output(); strings.TrimSpace(string(where)) != userBin+"/unshare" {
		t.Fatalf("control: PATH names %q for unshare, want the planted fake", where)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
