package maketest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// binDir is a PATH holding only the tools make lint-sh's recipe needs (make, sh, find,
// xargs), plus a shellcheck when script is not "": a stand-in that records its arguments
// in log and runs script.
func binDir(t *testing.T, script, log string) string {
	t.Helper()
	d := t.TempDir()
	for _, tool := range []string{"make", "sh", "find", "xargs"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s is not installed", tool)
		}
		if err := os.Symlink(p, filepath.Join(d, tool)); err != nil {
			t.Fatal(err)
		}
	}
	if script != "" {
		os.WriteFile(filepath.Join(d, "shellcheck"), []byte("#!/bin/sh\necho \"$@\" >>"+log+"\n"+script+"\n"), 0o755)
	}
	return d
}

// TestLintShellcheckRule runs `make lint-sh` (the shell part of make lint) with and
// without shellcheck on PATH, in and out of CI: missing, it warns and passes for a
// developer but fails under CI=true; present, every guest script and .ci/run reach it (the
// stand-in records them) and a finding fails the target; the real shellcheck, where
// installed, passes on the repository's scripts.
func TestLintShellcheckRule(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "shellcheck.args")
	cases := []struct {
		name     string
		script   string // the stand-in shellcheck's body; "" none on PATH; "real" the host's
		ci       bool
		wantFail bool
		want     string
	}{
		{name: "missing, developer: warns and skips", want: "lint-sh: WARNING: shellcheck is not installed, the shell scripts were NOT checked (apt-get install shellcheck); CI checks them"},
		{name: "missing, CI: fails", ci: true, wantFail: true, want: "lint-sh: shellcheck is not installed (Debian package shellcheck; .ci/run installs it)"},
		{name: "present: the scripts reach it", script: "exit 0", want: "shellcheck -S warning (the guest scripts and .ci/run)"},
		{name: "present, a finding: fails", script: "echo 'SC2086: Double quote'; exit 1", ci: true, wantFail: true, want: "SC2086"},
		{name: "the real shellcheck passes on the repository", script: "real", want: "shellcheck -S warning"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(log)
			path := binDir(t, tc.script, log)
			if tc.script == "real" {
				if _, err := exec.LookPath("shellcheck"); err != nil {
					t.Skip("shellcheck is not installed")
				}
				path = os.Getenv("PATH")
			}
			cmd := exec.Command("make", "-s", "--no-print-directory", "lint-sh")
			cmd.Dir = root
			env := []string{"PATH=" + path, "HOME=" + t.TempDir()}
			if tc.ci {
				env = append(env, "CI=true")
			}
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.wantFail {
				t.Fatalf("make lint-sh: err %v, want failure %v:\n%s", err, tc.wantFail, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
			if tc.script == "exit 0" {
				args, _ := os.ReadFile(log)
				for _, f := range []string{".ci/run", "internal/provision/provision.sh", "internal/containers/scripts/podman-service.sh", "-S warning"} {
					if !strings.Contains(string(args), f) {
						t.Errorf("shellcheck was not given %s: %s", f, args)
					}
				}
			}
		})
	}
}
