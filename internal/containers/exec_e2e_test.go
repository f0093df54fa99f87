//go:build e2e && linux

package containers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/lev/sandbox/sbxtest"
)

// syncBuf is a bytes.Buffer safe to read while Exec writes it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// execContainer runs a hardened busybox container (lever's Spec, the run user's real
// rootless podman) that sleeps, for Exec to reach.
func execContainer(t *testing.T) (*testGuest, string) {
	t.Helper()
	g := newTestGuest(t)
	tar := filepath.Join(g.home, "rootfs.tar")
	if err := sbxtest.WriteBusyboxRootfs(tar); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tar, 0o644)
	const ref = "localhost/lvtbj-busybox:exec"
	res, err := g.runner.Run(context.Background(), guest.Cmd{As: guest.RunUser, Argv: []string{"podman", "import", tar, ref}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("podman import: %v %s", err, res.Stderr)
	}
	tree := filepath.Join(g.home, "tree")
	os.MkdirAll(tree, 0o755)
	chownR(t, tree, g.uid)
	// The plan wants each root the lev container mounts; the manager's dirs exist, empty.
	roots := map[string]string{}
	for _, r := range []string{"tickets", "levhome", "bench"} {
		roots[r] = filepath.Join(g.home, r)
		os.MkdirAll(filepath.Join(roots[r], AgentDir(Manager, "")), 0o700)
		chownR(t, roots[r], g.uid)
	}
	cs, err := Plan(Params{Instance: "lvtbjx", Image: ref, BenchImage: ref, Runtime: g.runtime, TreeSource: tree,
		TicketRoot: roots["tickets"], LevHomeRoot: roots["levhome"], BenchRoot: roots["bench"], Command: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.client.Ensure(cs[0], false); err != nil {
		t.Fatal(err)
	}
	return g, cs[0].Name
}

// TestExecE2E drives (*Client).Exec against a real container: output split by stream,
// exit codes passed through, stdin forwarded, env and workdir, and a missing container
// refused.
func TestExecE2E(t *testing.T) {
	g, name := execContainer(t)
	ctx := context.Background()
	cases := []struct {
		name             string
		container        string
		o                ExecOptions
		wantCode         int
		wantOut, wantErr string
		wantFail         string // Exec's own error
	}{
		{name: "echo, exit 0", o: ExecOptions{Argv: []string{"echo", "hello from the jail"}}, wantOut: "hello from the jail\n"},
		{name: "exit 3 passed through, stderr apart", o: ExecOptions{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, wantCode: 3, wantOut: "out\n", wantErr: "err\n"},
		{name: "stdin forwarded to EOF", o: ExecOptions{Argv: []string{"sh", "-c", "wc -c; cat"}, Stdin: strings.NewReader("")}, wantOut: "0\n"},
		{name: "stdin bytes arrive", o: ExecOptions{Argv: []string{"sh", "-c", "cat; echo; echo done"}, Stdin: strings.NewReader("payload from the host")}, wantOut: "payload from the host\ndone\n"},
		{name: "no stdin: command sees EOF", o: ExecOptions{Argv: []string{"sh", "-c", "cat; echo end"}}, wantOut: "end\n"},
		{name: "env and workdir", o: ExecOptions{Argv: []string{"sh", "-c", "echo $LEVER_T; pwd"}, Env: []string{"LEVER_T=set"}, WorkDir: "/tmp"}, wantOut: "set\n/tmp\n"},
		{name: "no tty without TTY", o: ExecOptions{Argv: []string{"sh", "-c", "tty; true"}}, wantOut: "not a tty\n"},
		{name: "command not found is 127", o: ExecOptions{Argv: []string{"/no/such"}}, wantCode: 127, wantFail: ""},
		{name: "missing container refused", container: "lvtbjx-none", o: ExecOptions{Argv: []string{"true"}}, wantFail: "lvtbjx-none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			tc.o.Stdout, tc.o.Stderr = &out, &errb
			c := name
			if tc.container != "" {
				c = tc.container
			}
			code, err := g.client.Exec(ctx, c, tc.o)
			if tc.wantFail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantFail) {
					t.Fatalf("err %v, want one naming %q", err, tc.wantFail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "command not found is 127" {
				// podman reports a missing executable as 127 (crun) or 126 (runc).
				if code != 127 && code != 126 {
					t.Errorf("exit %d, want 126 or 127", code)
				}
				return
			}
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.wantCode, errb.String())
			}
			if out.String() != tc.wantOut {
				t.Errorf("stdout %q, want %q", out.String(), tc.wantOut)
			}
			if errb.String() != tc.wantErr {
				t.Errorf("stderr %q, want %q", errb.String(), tc.wantErr)
			}
		})
	}
}

// TestExecTTYE2E runs a TTY session whose host terminal is a real pseudo-terminal: the
// command sees a tty of the host terminal's size, the host terminal is raw during the
// session and restored after, a SIGWINCH resize reaches the command, typed input
// arrives, and the exit code comes back.
func TestExecTTYE2E(t *testing.T) {
	g, name := execContainer(t)
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	go func() { // drain the slave's echo so the pty never blocks
		buf := make([]byte, 4096)
		for {
			if _, err := master.Read(buf); err != nil {
				return
			}
		}
	}()
	if err := pty.Setsize(master, &pty.Winsize{Rows: 33, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if before.Lflag&unix.ICANON == 0 {
		t.Fatal("a fresh pty should start canonical")
	}
	var out syncBuf
	type res struct {
		code int
		err  error
	}
	done := make(chan res, 1)
	go func() {
		code, err := g.client.Exec(context.Background(), name, ExecOptions{
			Argv: []string{"sh", "-c", "tty >/dev/null && echo IS-TTY; stty size; read x; stty size; echo got:$x; exit 5"},
			TTY:  true, Stdin: slave, Stdout: &out,
		})
		done <- res{code, err}
	}()
	waitFor := func(s string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(out.String(), s) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in output %q", s, out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("33 101")
	during, _ := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if during.Lflag&unix.ICANON != 0 || during.Lflag&unix.ECHO != 0 {
		t.Errorf("host terminal not in raw mode during the session (lflag %#x)", during.Lflag)
	}
	pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 120})
	syscall.Kill(os.Getpid(), syscall.SIGWINCH)
	time.Sleep(500 * time.Millisecond)
	master.Write([]byte("hi\r"))
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.code != 5 {
		t.Errorf("exit %d, want 5", r.code)
	}
	for _, want := range []string{"IS-TTY", "33 101", "40 120", "got:hi"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q: %q", want, out.String())
		}
	}
	after, _ := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("host terminal not restored: lflag %#x -> %#x", before.Lflag, after.Lflag)
	}
}

// conmons counts the conmon processes running as uid (the run user's: one per running
// container, one per live exec session); with execOnly, the exec sessions' alone (podman
// starts those with --exec-process-spec).
func conmons(t *testing.T, uid int, execOnly ...bool) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil || !strings.HasPrefix(string(st), "Name:\tconmon\n") {
			continue
		}
		if len(execOnly) > 0 && execOnly[0] {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if !slices.Contains(strings.Split(string(cmdline), "\x00"), "--exec-process-spec") {
				continue
			}
		}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				n++
			}
		}
	}
	return n
}

// TestExecLeavesNoConmon: an exec session's conmon is gone within seconds of Exec's return
// (polled for 15 s), not 300 s later: the provisioned containers.conf sets
// exit_command_delay = 10 (not 0: the cleanup would race Exec for the session's exit code).
// The control: while a session runs, its conmon is counted, so the count sees what it
// claims to; and the exit codes still come back.
func TestExecLeavesNoConmon(t *testing.T) {
	g, name := execContainer(t)
	ctx := context.Background()
	// An earlier test's exec session may still be within its 10 s delay: the count before
	// is taken once those have gone, or it would count a conmon that leaves during the test.
	for end := time.Now().Add(15 * time.Second); conmons(t, g.uid, true) > 0 && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	base := conmons(t, g.uid)
	if base < 1 {
		t.Fatalf("%d conmon processes for the run user with its container running, want at least 1", base)
	}
	done := make(chan error, 1)
	go func() {
		_, err := g.client.Exec(ctx, name, ExecOptions{Argv: []string{"sleep", "2"}})
		done <- err
	}()
	during := base
	for end := time.Now().Add(2 * time.Second); during == base && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		during = conmons(t, g.uid)
	}
	if during <= base {
		t.Errorf("control: %d conmon processes while an exec runs, want more than %d", during, base)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		code, err := g.client.Exec(ctx, name, ExecOptions{Argv: []string{"sh", "-c", "exit " + strconv.Itoa(i)}})
		if err != nil || code != i {
			t.Fatalf("exec %d: exit %d, %v", i, code, err)
		}
	}
	start := time.Now()
	n := conmons(t, g.uid)
	for ; n > base && time.Since(start) < 15*time.Second; n = conmons(t, g.uid) {
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("6 exec sessions: %d conmon processes before, %d during one, %d %v after the last returned", base, during, n, time.Since(start).Round(10*time.Millisecond))
	if n != base {
		t.Errorf("%d conmon processes 15 s after 6 exec sessions ended, want %d (the container's own): sessions leave theirs behind", n, base)
	}
}
