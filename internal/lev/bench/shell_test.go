package bench_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBenchShellCoversTheChannel runs the built `lev bench shell` (what lever shell starts
// in the workbench) with a script that looks for the channel's directory's content, tries
// to take its place, and reports its ignored signals and exit code. Control: the same
// script run bare sees the file and can replace it.
func TestBenchShellCoversTheChannel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "chan")
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "key"), []byte("secret"), 0o600)
	script := `echo "LS:$(ls -A "$D")"; cat "$D/key"; echo; rm "$D/key" && echo REMOVED; touch "$D/planted" && echo PLANTED; umount "$D" 2>/dev/null && echo UNMOUNTED; grep SigIgn /proc/self/status; exit 7`
	run := func(argv ...string) (string, int) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "D=" + dir}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := run(levBin(t), "bench", "shell", "--hide", dir, "--", "/bin/sh", "-c", script)
	if code != 7 {
		t.Fatalf("exit %d, want the command's 7:\n%s", code, out)
	}
	if !strings.Contains(out, "LS:\n") {
		t.Errorf("confined, the session sees the channel's directory's content:\n%s", out)
	}
	for _, bad := range []string{"secret", "REMOVED", "PLANTED", "UNMOUNTED"} {
		if strings.Contains(out, bad) {
			t.Errorf("confined, the session got %q:\n%s", bad, out)
		}
	}
	// ^C and ^\ must reach the session's commands: not ignored there.
	for _, l := range strings.Split(out, "\n") {
		if hex, ok := strings.CutPrefix(l, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil || mask&(1<<1|1<<2) != 0 {
				t.Errorf("SIGINT or SIGQUIT ignored in the session: %s", l)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "key")); err != nil {
		t.Fatalf("the channel's file is gone after the confined session: %v", err)
	}
	// Control: bare, the same script reaches and replaces it.
	out, code = run("/bin/sh", "-c", script)
	if code != 7 || !strings.Contains(out, "LS:key") || !strings.Contains(out, "secret") || !strings.Contains(out, "REMOVED") || !strings.Contains(out, "PLANTED") {
		t.Fatalf("control: exit %d, the bare script did not reach the directory:\n%s", code, out)
	}
}
