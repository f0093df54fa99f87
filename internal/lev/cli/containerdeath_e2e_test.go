//go:build e2e

package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/sandbox/sbxtest"
	"github.com/lever-jail/lever/internal/testutil"
)

// Its own tag: other tests remove theirs at their end.
const dieImage = "localhost/lvtsbx-busybox:diewithlev-e2e"

// TestContainerSandboxDiesWithLev drives the real binary with [sandbox] kind =
// "container": a first shell call leaves a process running in the warm container, a
// second is stuck in a long command when the daemon (which owns the container) is killed,
// by SIGKILL or SIGTERM. The container and every process in it are gone soon after.
// Controls: while lev lives, the container is up and the first call's process is still
// running during the second call (the warm container outlives a call), with the keep-alive
// (lev's own binary) as its PID 1.
func TestContainerSandboxDiesWithLev(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "runc")
	tarball := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := sbxtest.WriteBusyboxRootfs(tarball); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("podman", "--runtime", "runc", "import", tarball, dieImage).CombinedOutput(); err != nil {
		t.Fatalf("podman import: %v: %s", err, out)
	}
	t.Cleanup(func() {
		exec.Command("podman", "--runtime", "runc", "rm", "-f", "--filter", "ancestor="+dieImage).Run()
		exec.Command("podman", "rmi", "-f", dieImage).Run()
	})
	bin := buildLev(t)
	engineEnv := []string{"LEV_SANDBOX_ENGINE_ARGS=--runtime runc --cgroup-manager cgroupfs",
		"LEV_SANDBOX_RUN_ARGS=--ulimit nofile=1024:1024 --ulimit nproc=1024:1024"}
	sbx := "[tool_permissions]\nshell = \"allow\"\n[sandbox]\nkind = \"container\"\nimage = \"" + dieImage + "\"\nnetwork = false\n"

	for i, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			// Unique sleep lengths name this case's processes in the host's /proc.
			bg := strconv.Itoa(7_300_000 + 10*i + time.Now().Nanosecond()%1000*100)
			fg := strconv.Itoa(7_200_000 + 10*i + time.Now().Nanosecond()%1000*100)
			hold := strconv.Itoa(7_100_000 + 10*i + time.Now().Nanosecond()%1000*100)
			b := newBox(t, bin, "lev", sbx, engineEnv...)
			b.agent("prober", proberBlueprint)
			call := func(turn int, cmd string) string {
				return fmt.Sprintf("[[rule]]\nstage = \"probe\"\nturn = %d\n[[rule.call]]\ntool = \"shell\"\nargs = '{\"command\": %s}'\n", turn, jsonArg(cmd))
			}
			mustWrite(t, b.script, call(1, "sleep "+bg+" </dev/null >/dev/null 2>&1 & "+
				// The attack: a second writer on the keep-alive's pipe, opened through
				// /proc/1/fd, would hold the container up after lev is gone.
				"(sleep "+hold+" 2>hold.err 9>/proc/1/fd/3 </dev/null >/dev/null &); echo started")+
				call(2, "cat /proc/1/cmdline; sleep "+fg)+
				"[[rule]]\nstage = \"probe\"\nturn = 3\n[[rule.call]]\ntool = \"submit_output\"\nargs = '{\"output\": \"{{last}}\"}'\n")
			cmd := exec.Command(b.bin, "run", "prober", "--workdir", b.wd, "--yolo")
			cmd.Env, cmd.Dir = b.env, b.dir
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waited := make(chan struct{})
			go func() { cmd.Wait(); close(waited) }()
			defer func() { cmd.Process.Kill(); <-waited }()

			// Control: the second call runs while the first call's process lives on.
			waitProcs(t, fg, "control: the second call never ran\n"+out.String(), func(n int) bool { return n >= 1 })
			if n := len(markerProcs(bg)); n == 0 {
				t.Fatalf("control: the first call's process did not outlive its call in the warm container")
			}
			if n := len(markerProcs(hold)); n != 0 {
				t.Fatalf("a command opened the keep-alive's pipe for writing (/proc/1/fd/3)")
			}
			if data, _ := os.ReadFile(filepath.Join(b.wd, "hold.err")); !strings.Contains(string(data), "/proc/1/fd/3") {
				t.Fatalf("control: the attempt on /proc/1/fd/3 did not run (hold.err %q)", data)
			} else {
				t.Logf("the attempt on /proc/1/fd/3: %s", bytes.TrimSpace(data))
			}
			names := dieContainers(t)
			if len(names) != 1 {
				t.Fatalf("control: want one running container of %s, got %q", dieImage, names)
			}
			if pid1 := containerPID1(t, names[0]); !strings.Contains(pid1, "__sandbox-keepalive") {
				t.Fatalf("control: PID 1 of %s is %q, want lev's keep-alive", names[0], pid1)
			}

			data, err := os.ReadFile(filepath.Join(b.home, "daemon.pid"))
			if err != nil {
				t.Fatal(err)
			}
			daemon, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(daemon, sig); err != nil {
				t.Fatal(err)
			}
			waitProcs(t, fg, "the stuck command outlived lev", func(n int) bool { return n == 0 })
			waitProcs(t, bg, "the first call's process outlived lev", func(n int) bool { return n == 0 })
			deadline := time.Now().Add(90 * time.Second)
			for names := dieContainers(t); len(names) > 0; names = dieContainers(t) {
				if time.Now().After(deadline) {
					t.Fatalf("the sandbox container outlived lev: %q", names)
				}
				time.Sleep(500 * time.Millisecond)
			}
		})
	}
}

// dieContainers lists the containers (running or not) of this test's image.
func dieContainers(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("podman", "--runtime", "runc", "ps", "-a", "--filter", "ancestor="+dieImage, "--format", "{{.Names}}").Output()
	if err != nil {
		t.Fatalf("podman ps: %v", err)
	}
	return strings.Fields(string(out))
}

// containerPID1 is the command line of the container's PID 1, read on the host.
func containerPID1(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("podman", "--runtime", "runc", "inspect", "-f", "{{.State.Pid}}", name).Output()
	if err != nil {
		t.Fatalf("podman inspect: %v", err)
	}
	data, _ := os.ReadFile("/proc/" + strings.TrimSpace(string(out)) + "/cmdline")
	return string(bytes.ReplaceAll(data, []byte{0}, []byte(" ")))
}
