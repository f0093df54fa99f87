package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/bench"
	"github.com/lever-jail/lever/internal/lev/pipeline"
)

// The attack tests drive the built lev binary's `lev bench serve` over a real unix
// socket, and check real processes in /proc.

// dialEnv makes the test binary a TCP client: it connects to the address and exits 0, or
// prints the error and exits 3 (the network=false test's command).
const dialEnv = "BENCH_TEST_DIAL"

func TestMain(m *testing.M) {
	if addr := os.Getenv(dialEnv); addr != "" {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(3)
		}
		c.Write([]byte("hello from the bench\n"))
		c.Close()
		os.Exit(0)
	}
	if sock := os.Getenv(fakeEnv); sock != "" {
		fakeServer(sock)
		return
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// fakeEnv makes the test binary an impostor bench at the given socket: it answers every
// request with stdout "FAKE" and runs nothing (what an agent's command could leave behind
// at the shared socket for a later network=false command).
const fakeEnv = "BENCH_TEST_FAKE"

// fakeRelayEnv makes the impostor a relay instead: it passes each request to the real
// server (at the socket's path plus ".real", a hard link the planting script made before
// it removed the socket) with "network":false turned into "network":true, and passes the
// real server's answer back: the man in the middle a proof of the answer alone would let
// through.
const fakeRelayEnv = "BENCH_TEST_FAKE_RELAY"

func fakeServer(sock string) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println("fake:", err)
		os.Exit(4)
	}
	relay := os.Getenv(fakeRelayEnv) == "1"
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(0)
		}
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		if !relay {
			c.Write([]byte(`{"started":true,"exit_code":0,"timed_out":false,"stdout":"RkFLRQ==","stderr":null,"stdout_truncated":false,"stderr_truncated":false}` + "\n"))
			c.Close()
			continue
		}
		if real, err := net.Dial("unix", sock+".real"); err == nil {
			real.Write(bytes.Replace(line, []byte(`"network":false`), []byte(`"network":true`), 1))
			answer, _ := bufio.NewReader(real).ReadBytes('\n')
			real.Close()
			c.Write(answer)
		}
		c.Close()
	}
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func levBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "levbench-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "lev")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/lever-jail/lever/cmd/lev")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// serve starts `lev bench serve` (under wrap, e.g. an unshare, when given) and returns
// the socket path once it answers.
func serve(t testing.TB, wrap ...string) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "exec.sock")
	argv := append(append([]string{}, wrap...), levBin(t), "bench", "serve", "--socket", sock)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SERVER_SECRET=must-not-leak"}
	logf, _ := os.Create(filepath.Join(dir, "serve.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("lev bench serve log:\n%s", b)
		}
	})
	// Polled for up to 30 s: a binary's start on a loaded machine can take seconds.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return sock
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("lev bench serve did not answer at %s", sock)
	return ""
}

// send writes one raw request line and returns the decoded response.
func send(t *testing.T, sock, line string) bench.Response {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(line)); err != nil {
		t.Fatal(err)
	}
	return readResp(t, c)
}

func readResp(t *testing.T, c net.Conn) bench.Response {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	raw, err := bufio.NewReaderSize(c, 1<<20).ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading the response: %v (%q)", err, raw)
	}
	var r bench.Response
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("response %q: %v", raw, err)
	}
	return r
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestCapIsLevShellCap(t *testing.T) {
	if bench.MaxOutput != pipeline.MaxResultBytes {
		t.Fatalf("bench.MaxOutput %d != pipeline.MaxResultBytes %d: the workbench must cap shell output as lev does", bench.MaxOutput, pipeline.MaxResultBytes)
	}
}

// TestBadRequestRunsNothing: a request the strict decoder or the validator refuses gets
// an error naming the key, and its command (which would create a marker file) never runs.
// The first row is the positive control: the same request, well formed, runs.
func TestBadRequestRunsNothing(t *testing.T) {
	sock := serve(t)
	tmp := t.TempDir()
	cases := []struct {
		name    string
		line    func(marker string) string
		wantErr string // "" = must run
	}{
		{"well-formed runs (control)", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100}` + "\n"
		}, ""},
		{"unknown key", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100,"privileged":true}` + "\n"
		}, `"privileged"`},
		{"duplicate key (second argv would win)", func(m string) string {
			return `{"argv":["/bin/true"],"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100}` + "\n"
		}, `"argv" appears twice`},
		{"case-variant key", func(m string) string {
			return `{"argv":["/bin/true"],"Argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100}` + "\n"
		}, `"Argv"`},
		{"case-variant network (false then True)", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"network":false,"Network":true,"stdout_max":100,"stderr_max":100}` + "\n"
		}, `"Network"`},
		{"Kelvin-sign key folds to a field", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"networ\u212a":true,"network":false,"stdout_max":100,"stderr_max":100}` + "\n"
		}, "networ"},
		{"network missing", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"stdout_max":100,"stderr_max":100}` + "\n"
		}, `"network"`},
		{"relative argv0", func(m string) string {
			return `{"argv":["sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100}` + "\n"
		}, `"argv"`},
		{"env key twice", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":["PATH=/bin","PATH=/evil"],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100}` + "\n"
		}, `"env"`},
		{"no deadline", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"network":true,"stdout_max":100,"stderr_max":100}` + "\n"
		}, `"deadline_ms"`},
		{"cap above lev's", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"network":true,"stdout_max":` + strconv.Itoa(bench.MaxOutput+1) + `,"stderr_max":100}` + "\n"
		}, `"stdout_max"`},
		{"relative dir", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"tmp","env":[],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100}` + "\n"
		}, `"dir"`},
		{"second request on the connection", func(m string) string {
			return `{"argv":["/bin/true"],"dir":"/","env":[],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100}` + "\n" +
				`{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100}` + "\n"
		}, "data after the request line"},
		{"trailing data on the line", func(m string) string {
			return `{"argv":["/bin/sh","-c","touch ` + m + `"],"dir":"/","env":[],"deadline_ms":5000,"network":true,"stdout_max":100,"stderr_max":100} {}` + "\n"
		}, "trailing data"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			marker := filepath.Join(tmp, fmt.Sprintf("marker-%d", i))
			r := send(t, sock, tc.line(marker))
			time.Sleep(100 * time.Millisecond) // a command that did start has had time to touch
			_, statErr := os.Stat(marker)
			if tc.wantErr == "" {
				if r.Error != "" || !r.Started || r.ExitCode != 0 || statErr != nil {
					t.Fatalf("control did not run: %+v, marker: %v", r, statErr)
				}
				return
			}
			if r.Started || !strings.Contains(r.Error, tc.wantErr) {
				t.Fatalf("want a refusal naming %s, got %+v", tc.wantErr, r)
			}
			if statErr == nil {
				t.Fatalf("refused request ran anyway: %s exists", marker)
			}
		})
	}
}

// TestEnvOnlyFromRequest: the command sees exactly the request's environment, nothing of
// the server's (SERVER_SECRET is in lev bench serve's).
func TestEnvOnlyFromRequest(t *testing.T) {
	sock := serve(t)
	net := true
	r := send(t, sock, mustJSON(bench.Request{Argv: []string{"/usr/bin/env"}, Dir: "/", Env: []string{"ONLY=this"},
		DeadlineMS: 5000, Network: &net, StdoutMax: 1000, StderrMax: 1000})+"\n")
	if r.Error != "" || strings.TrimSpace(string(r.Stdout)) != "ONLY=this" {
		t.Fatalf("env: %+v (stdout %q)", r, r.Stdout)
	}
}

func TestOutputCapped(t *testing.T) {
	sock := serve(t)
	net := true
	cases := []struct {
		name        string
		script      string
		max         int
		wantOut     int
		wantCut     bool
		wantErrCut  bool
		wantErrSize int
	}{
		{"small output whole (control)", "printf 12345; printf ab >&2", 100, 5, false, false, 2},
		{"stdout past the cap", "head -c 1000000 /dev/zero; printf ab >&2", 4096, 4096, true, false, 2},
		{"stderr past the cap", "head -c 1000000 /dev/zero >&2", 4096, 0, false, true, 4096},
		{"lev's cap", "head -c 1000000 /dev/zero", bench.MaxOutput, bench.MaxOutput, true, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := send(t, sock, mustJSON(bench.Request{Argv: []string{"/bin/sh", "-c", tc.script}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"},
				DeadlineMS: 20000, Network: &net, StdoutMax: tc.max, StderrMax: tc.max})+"\n")
			if r.Error != "" || r.ExitCode != 0 {
				t.Fatalf("%+v", r)
			}
			if len(r.Stdout) != tc.wantOut || r.StdoutTruncated != tc.wantCut || len(r.Stderr) != tc.wantErrSize || r.StderrTruncated != tc.wantErrCut {
				t.Fatalf("stdout %d cut %v, stderr %d cut %v; want %d %v %d %v", len(r.Stdout), r.StdoutTruncated, len(r.Stderr), r.StderrTruncated,
					tc.wantOut, tc.wantCut, tc.wantErrSize, tc.wantErrCut)
			}
		})
	}
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z' && s[i+2] != 'X'
}

func gone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return os.IsNotExist(err)
}

// findPids returns the pids (in the test's PID namespace: the command may have one of its
// own, where $! means something else) of processes whose argv equals one of argvs.
func findPids(argvs ...[]string) map[string]int {
	out := map[string]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		got := strings.Join(strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), " ")
		for _, a := range argvs {
			if got == strings.Join(a, " ") {
				out[got] = pid
			}
		}
	}
	return out
}

// readPids waits for the command's child and grandchild (treeScript with tag) to run.
func readPids(t *testing.T, tag string) []int {
	t.Helper()
	child := []string{"sh", "-c", "sleep " + tag + "1 & wait"}
	grand := []string{"sleep", tag + "1"}
	for i := 0; i < 200; i++ {
		m := findPids(child, grand)
		if len(m) == 2 {
			return []int{m[strings.Join(child, " ")], m[strings.Join(grand, " ")]}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("the command's child and grandchild never showed up in /proc")
	return nil
}

// treeScript starts a child that starts a grandchild that leaves the process group
// (setsid: the group kill alone would miss it), all sleeping.
func treeScript(tag string) string {
	return `setsid sh -c 'sleep ` + tag + `1 & wait' & wait`
}

// uniqueTag makes sleep durations no other process on the machine has.
func uniqueTag() string { return strconv.Itoa(100000 + int(time.Now().UnixNano()%800000)) }

// TestKillOnDeadlineAndDisconnect: the command's whole process group, grandchild
// included, is gone from /proc when the deadline passes or the client goes away; before
// that both are alive (the control: they really ran and would have lived on).
func TestKillOnDeadlineAndDisconnect(t *testing.T) {
	sock := serve(t)
	for _, mode := range []string{"deadline", "disconnect"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			net := true
			deadline := int64(60000)
			if mode == "deadline" {
				// Long enough that the control below (both processes seen alive before
				// the deadline kills them) holds on a loaded machine.
				deadline = 4000
			}
			c, err := netDial(sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			tag := uniqueTag()
			c.Write([]byte(mustJSON(bench.Request{Argv: []string{"/bin/sh", "-c", treeScript(tag)}, Dir: dir, Env: []string{"PATH=/usr/bin:/bin"},
				DeadlineMS: deadline, Network: &net, StdoutMax: 100, StderrMax: 100}) + "\n"))
			pids := readPids(t, tag)
			for _, p := range pids {
				if !alive(p) {
					t.Fatalf("pid %d not alive while the command runs (control)", p)
				}
			}
			if mode == "deadline" {
				r := readResp(t, c)
				if !r.TimedOut || r.ExitCode == 0 {
					t.Fatalf("want timed_out and a non-zero exit: %+v", r)
				}
				if el := time.Since(start); el > 15*time.Second {
					t.Fatalf("deadline of %dms took %v", deadline, el)
				}
			} else {
				c.Close()
			}
			waitGone(t, pids)
		})
	}
}

func waitGone(t *testing.T, pids []int) {
	t.Helper()
	waitGoneFor(t, pids, 5*time.Second)
}

// waitGoneFor is waitGone with a longer wait, for a kill that comes only after a grace.
func waitGoneFor(t *testing.T, pids []int, d time.Duration) {
	t.Helper()
	for i := 0; i < int(d/(50*time.Millisecond)); i++ {
		all := true
		for _, p := range pids {
			if !gone(p) {
				all = false
			}
		}
		if all {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		t.Errorf("pid %d still in /proc: %s", p, b)
	}
}

func netDial(sock string) (net.Conn, error) { return net.Dial("unix", sock) }

// TestBackgroundJobDoesNotOutliveCommand: a command that exits leaving jobs behind, one in
// its process group and one that left it with setsid, takes both with it (a job would
// otherwise escape the deadline, or wait at the bench's socket for a later command).
func TestBackgroundJobDoesNotOutliveCommand(t *testing.T) {
	sock := serve(t)
	dir := t.TempDir()
	net := true
	tag := uniqueTag()
	r := send(t, sock, mustJSON(bench.Request{Argv: []string{"/bin/sh", "-c", `sleep ` + tag + `1 >/dev/null 2>&1 & setsid sleep ` + tag + `2 >/dev/null 2>&1 & sleep 0.3; echo started`}, Dir: dir,
		Env: []string{"PATH=/usr/bin:/bin"}, DeadlineMS: 10000, Network: &net, StdoutMax: 100, StderrMax: 100})+"\n")
	if r.Error != "" || strings.TrimSpace(string(r.Stdout)) != "started" {
		t.Fatalf("%+v", r)
	}
	if m := findPids([]string{"sleep", tag + "1"}, []string{"sleep", tag + "2"}); len(m) != 0 {
		waitGone(t, func() []int {
			var p []int
			for _, v := range m {
				p = append(p, v)
			}
			return p
		}())
	}
	// Control: the same jobs are there while a command that waits for them runs.
	c, err := netDial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(mustJSON(bench.Request{Argv: []string{"/bin/sh", "-c", `sleep ` + tag + `1 >/dev/null 2>&1 & setsid sleep ` + tag + `2 >/dev/null 2>&1 & wait`}, Dir: dir,
		Env: []string{"PATH=/usr/bin:/bin"}, DeadlineMS: 10000, Network: &net, StdoutMax: 100, StderrMax: 100}) + "\n"))
	for i := 0; ; i++ {
		if len(findPids([]string{"sleep", tag + "1"}, []string{"sleep", tag + "2"})) == 2 {
			break
		}
		if i > 200 {
			t.Fatal("control: the jobs never showed up in /proc")
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// TestNetworkOff: with network=false the command cannot connect to a listener the test
// opened on loopback in its own netns (the command's fresh netns has only a loopback of
// its own, down); the same command with network=true connects (control).
func TestNetworkOff(t *testing.T) {
	sock := serve(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, _ := bufio.NewReader(c).ReadString('\n')
			got <- b
			c.Close()
		}
	}()
	self, _ := os.Executable()
	for _, network := range []bool{true, false} {
		t.Run(fmt.Sprintf("network=%v", network), func(t *testing.T) {
			nw := network
			r := send(t, sock, mustJSON(bench.Request{Argv: []string{self}, Dir: "/", Env: []string{dialEnv + "=" + ln.Addr().String()},
				DeadlineMS: 20000, Network: &nw, StdoutMax: 1000, StderrMax: 1000})+"\n")
			if r.Error != "" {
				t.Fatalf("%+v", r)
			}
			// The command has exited: whatever it sent is at the listener already, and
			// only the accept loop's turn to run is awaited (seconds, on a loaded machine).
			wait := 2 * time.Second
			if network {
				wait = 20 * time.Second
			}
			select {
			case line := <-got:
				if !network {
					t.Fatalf("network=false reached the test's listener: %q", line)
				}
			case <-time.After(wait):
				if network {
					t.Fatalf("network=true did not connect (control): %+v %s", r, r.Stdout)
				}
			}
			if network != (r.ExitCode == 0) {
				t.Fatalf("exit %d for network=%v: %s", r.ExitCode, network, r.Stdout)
			}
		})
	}
}

// limitUserNamespaces wraps a command in a user namespace of its own whose
// max_user_namespaces is n (the limit counts for every namespace made below it), or skips
// where the kernel does not let a test set it.
func limitUserNamespaces(t *testing.T, n int) []string {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not installed")
	}
	set := fmt.Sprintf("echo %d > /proc/sys/user/max_user_namespaces", n)
	probe := exec.Command("unshare", "--user", "--map-root-user", "sh", "-c", set)
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("cannot limit user namespaces in a user namespace here: %v %s", err, out)
	}
	return []string{"unshare", "--user", "--map-root-user", "sh", "-c", set + ` && exec "$@"`, "sh"}
}

// TestNeverServesUnconfined (issue 27 item 16, the kernel's refusal): where the kernel
// refuses the serving process its own user and mount namespace (max_user_namespaces = 0),
// nothing could cover the channel's directory, so lev bench serve refuses to serve, saying
// why, and never answers at the socket (it used to serve from the outer process, every
// command beside the key). Where the serving process got its namespaces but a command
// cannot get its own (the limit spent: 1 allows the server's only), a command with the
// network on is refused too, and never run in the server's namespaces, where it could
// unmount the cover (it used to fall back to a process group). Control: with room for
// both, the same command runs.
func TestNeverServesUnconfined(t *testing.T) {
	t.Run("no namespace for the server", func(t *testing.T) {
		wrap := limitUserNamespaces(t, 0)
		sock := filepath.Join(t.TempDir(), "exec.sock")
		argv := append(append([]string{}, wrap...), levBin(t), "bench", "serve", "--socket", sock)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// Whichever comes first decides: the server's exit, or an answer at the socket
		// (it served unconfined). The deadline is only there so a hang cannot stall CI.
		var err error
	wait:
		for deadline := time.Now().Add(2 * time.Minute); ; {
			select {
			case err = <-exited:
				break wait
			default:
			}
			if c, derr := net.Dial("unix", sock); derr == nil {
				c.Close()
				cmd.Process.Kill()
				<-exited
				t.Fatalf("lev bench serve answers at the socket with no namespace to hide it in:\n%s", out.String())
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				<-exited
				t.Fatalf("lev bench serve neither served nor refused:\n%s", out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err == nil || !strings.Contains(out.String(), "not serving unconfined") {
			t.Fatalf("lev bench serve without namespaces: %v\n%s", err, out.String())
		}
	})
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	cases := []struct {
		name    string
		limit   int // -1: no limit set
		network bool
		runs    bool
		refusal string
	}{
		{"control: room for the server and its commands", -1, true, true, ""},
		{"no namespace left for a command", 1, true, false, "never runs a command beside its exec channel"},
		{"no namespace left for a command, network off", 1, false, false, "it is never run with the network instead"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var wrap []string
			if tc.limit >= 0 {
				wrap = limitUserNamespaces(t, tc.limit)
			}
			sock := serve(t, wrap...)
			marker := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			nw := tc.network
			r := send(t, sock, mustJSON(bench.Request{Argv: []string{"/bin/sh", "-c", "touch " + marker}, Dir: "/", Env: []string{"PATH=/usr/bin:/bin"},
				DeadlineMS: 5000, Network: &nw, StdoutMax: 100, StderrMax: 100})+"\n")
			_, statErr := os.Stat(marker)
			if tc.runs {
				if r.Error != "" || statErr != nil {
					t.Fatalf("control: %+v %v", r, statErr)
				}
				return
			}
			if r.Started || !strings.Contains(r.Error, tc.refusal) || statErr == nil {
				t.Fatalf("want a refusal and no marker: %+v, marker err %v", r, statErr)
			}
		})
	}
}

// TestListen: the socket is 0600; a stale socket is replaced; a live server, a file that
// is not a socket, and a parent that is not a directory are refused.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	notSock := filepath.Join(dir, "file")
	os.WriteFile(notSock, []byte("keep me"), 0o644)
	live := serve(t)
	cases := []struct {
		name, path, wantErr string
	}{
		{"stale socket replaced", stale, ""},
		{"fresh path", filepath.Join(dir, "new.sock"), ""},
		{"live server", live, "another server"},
		{"not a socket", notSock, "not a socket"},
		{"parent is a file", filepath.Join(notSock, "x.sock"), "not a directory"},
		{"parent missing", filepath.Join(dir, "nope", "x.sock"), "parent"},
		{"relative", "x.sock", "absolute"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &bench.Server{Socket: tc.path}
			ln, err := s.Listen()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			fi, err := os.Lstat(tc.path)
			if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
				t.Fatalf("socket mode %v, %v", fi.Mode(), err)
			}
		})
	}
	if b, _ := os.ReadFile(notSock); string(b) != "keep me" {
		t.Fatal("the file at the socket path was touched")
	}
}

// BenchmarkRoundTrip times one `/bin/true` through the built server, network on and off
// (the namespace costs a clone with new user and net namespaces).
func BenchmarkRoundTrip(b *testing.B) {
	for _, network := range []bool{true, false} {
		b.Run(fmt.Sprintf("network=%v", network), func(b *testing.B) {
			sock := serve(b)
			nw := network
			line := mustJSON(bench.Request{Argv: []string{"/bin/true"}, Dir: "/", Env: []string{}, DeadlineMS: 5000, Network: &nw, StdoutMax: 100, StderrMax: 100}) + "\n"
			c := bench.Client{Socket: sock}
			req := bench.Request{}
			json.Unmarshal([]byte(line), &req)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r, err := c.Run(context.Background(), req)
				if err != nil || r.ExitCode != 0 {
					b.Fatalf("%+v %v", r, err)
				}
			}
		})
	}
}

// TestImpostorCannotTakeTheSocket: a network=true command tries to replace the bench's
// socket with a server of its own (left behind with setsid), which would answer, and run
// networked, a later network=false command. The command does not see the socket's
// directory (an empty read-only tmpfs it cannot unmount is over it) and what it starts dies
// with it: the real server keeps answering, during the command and after. Control: the
// same script run outside the bench does plant an impostor that answers.
func TestImpostorCannotTakeTheSocket(t *testing.T) {
	self, _ := os.Executable()
	on, off := true, false
	script := func(tail string) string {
		return `rm -f "$SOCK"; setsid "$SELF" >/dev/null 2>&1 & i=0; while [ ! -S "$SOCK" ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; ls -A "$(dirname "$SOCK")"; umount "$(dirname "$SOCK")" 2>/dev/null && echo UNMOUNTED; ` + tail
	}
	env := func(sock string) []string {
		return []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "SOCK=" + sock, "SELF=" + self, fakeEnv + "=" + sock}
	}
	later := bench.Request{Argv: []string{"/bin/sh", "-c", "echo REAL"}, Dir: "/", Env: []string{}, DeadlineMS: 5000, Network: &off, StdoutMax: 100, StderrMax: 100}

	// Planted from outside the bench (where the socket's directory is in reach), the
	// impostor takes the socket: the client reaches it, and refuses its answer, which
	// does not prove itself under this start's key. Each case's error is the proof that
	// the impostor, not the server, answered.
	for _, tc := range []struct {
		name, relay, why string
	}{
		{"an impostor that answers itself", "", "it carries no proof"},
		{"a relay to the real server that turns network on", "1", "its proof does not match"},
	} {
		t.Run("control: planted from outside the bench, "+tc.name+", is refused", func(t *testing.T) {
			sock := serve(t)
			cmd := exec.Command("/bin/sh", "-c", `ln "$SOCK" "$SOCK.real"; `+script("sleep 30"))
			cmd.Env = append(env(sock), fakeRelayEnv+"="+tc.relay)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				cmd.Wait()
				// The impostor left the group with setsid: find it by its socket and end it.
				for pid, argv := range procArgs() {
					if argv == self {
						if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); strings.Contains(string(b), fakeEnv+"="+sock) {
							syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
			}()
			var resp bench.Response
			var err error
			var nb *bench.NotTheBenchError
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
				resp, err = (bench.Client{Socket: sock}).Run(context.Background(), later)
				if errors.As(err, &nb) {
					if !strings.Contains(err.Error(), tc.why) || len(resp.Stdout) != 0 {
						t.Fatalf("refused for another reason than %q: %v (%+v)", tc.why, err, resp)
					}
					return
				}
				if err == nil && string(resp.Stdout) != "REAL\n" {
					t.Fatalf("the impostor's answer was accepted: %+v", resp)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Fatalf("the impostor never answered: %+v %v", resp, err)
		})
	}

	t.Run("through the bench, the socket stays the server's", func(t *testing.T) {
		sock := serve(t)
		client := bench.Client{Socket: sock}
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(mustJSON(bench.Request{Argv: []string{"/bin/sh", "-c", script("echo planted; sleep 30")}, Dir: "/", Env: env(sock),
			DeadlineMS: 20000, Network: &on, StdoutMax: 1000, StderrMax: 1000}) + "\n"))
		time.Sleep(2500 * time.Millisecond) // the script's wait for its socket has run out
		for _, phase := range []string{"while the command runs", "after it"} {
			resp, err := client.Run(context.Background(), later)
			if err != nil || strings.TrimSpace(string(resp.Stdout)) != "REAL" {
				t.Fatalf("%s: %+v %v", phase, resp, err)
			}
			if phase == "while the command runs" {
				c.Close() // ends the planting command
				time.Sleep(300 * time.Millisecond)
			}
		}
		// What the command saw where the socket is: nothing, and it could not unmount it.
		r, err := client.Run(context.Background(), bench.Request{Argv: []string{"/bin/sh", "-c", script("echo planted")}, Dir: "/", Env: env(sock),
			DeadlineMS: 20000, Network: &on, StdoutMax: 1000, StderrMax: 1000})
		if err != nil || strings.TrimSpace(string(r.Stdout)) != "planted" {
			t.Fatalf("the command saw %q (want only \"planted\": no socket, no unmount): %v", r.Stdout, err)
		}
		if resp, err := client.Run(context.Background(), later); err != nil || strings.TrimSpace(string(resp.Stdout)) != "REAL" {
			t.Fatalf("after a planting command that ended: %+v %v", resp, err)
		}
	})
}

// procArgs maps pids to argv[0].
func procArgs() map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		a, _, _ := strings.Cut(string(b), "\x00")
		out[pid] = a
	}
	return out
}
