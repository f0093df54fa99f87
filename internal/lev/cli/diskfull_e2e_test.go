//go:build e2e && linux

package cli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/testutil"
)

// TestRunOnAFullDisk: lev's home (its run records, events and daemon log) and the
// workdir on one small tmpfs the test mounts, as in a jail whose disk an agent can fill.
// The agent's shell call fills it; every record of the run's end then fails to be
// written. lev run must not wait forever: it exits 1 with the cause (no space left on
// device), and lev ps reports the run failed, not running. The control is the same run
// on a tmpfs the call does not fill: it completes, exit 0, so the run did reach the fill.
func TestRunOnAFullDisk(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildLev(t)
	cases := []struct {
		name  string
		fill  string
		code  int
		wants []string
	}{
		{"control: room left", "dd if=/dev/zero of=fill bs=1k count=1 2>&1; echo wrote", 0, []string{"wrote"}},
		{"the agent fills the disk", "dd if=/dev/zero of=fill bs=64k 2>&1; echo filled", 1, []string{"failed", "no space left on device"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "size=8m,mode=0700"); err != nil {
				t.Skipf("cannot mount a tmpfs: %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(root, syscall.MNT_DETACH) })
			levHome := filepath.Join(root, "lev")
			wd := filepath.Join(root, "wd")
			os.MkdirAll(wd, 0o755)
			env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + root, "LEV_HOME=" + levHome}
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			addr := ln.Addr().String()
			ln.Close()
			script := filepath.Join(levHome, "script.toml")
			mustWrite(t, script, `
[[rule]]
stage = "fill"
turn = 1
[[rule.call]]
tool = "shell"
args = '{"command": "`+tc.fill+`"}'
[[rule]]
turn = 2
[[rule.call]]
tool = "submit_output"
args = '{"output": "{{last}}"}'
`)
			mustWrite(t, filepath.Join(levHome, "config.toml"), "[daemon]\nlisten = \""+addr+"\"\n[provider]\nkind = \"scripted\"\nscript = \""+script+"\"\n")
			mustWrite(t, filepath.Join(levHome, "agents", "filler.toml"), "name = \"filler\"\nversion = \"1\"\n[stages.fill]\ntools = [\"shell\", \"submit_output\"]\n")
			t.Cleanup(func() { stopDaemon(filepath.Join(levHome, "daemon.pid")) })

			// Generous: the machine is loaded; a hang is what fails the test.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "run", "filler", "--workdir", wd, "--allow", "shell")
			cmd.Env = env
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("lev run still waiting after 3 minutes (a full disk hangs it)\nstdout %s\nstderr %s", out.String(), errb.String())
			}
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			all := out.String() + errb.String()
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout %s\nstderr %s", code, tc.code, out.String(), errb.String())
			}
			for _, w := range tc.wants {
				if !strings.Contains(all, w) {
					t.Errorf("output lacks %q\nstdout %s\nstderr %s", w, out.String(), errb.String())
				}
			}
			if tc.code == 0 {
				return
			}
			// lev ps (through the same daemon) says failed, not running.
			ps := exec.Command(bin, "ps")
			ps.Env = env
			psOut, _ := ps.CombinedOutput()
			if !strings.Contains(string(psOut), "failed") || strings.Contains(string(psOut), "running") {
				t.Errorf("lev ps:\n%s", psOut)
			}
		})
	}
}
