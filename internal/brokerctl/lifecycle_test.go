package brokerctl

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary act as `lever broker serve`: TestMain runs Serve with the
// options in the named file, so the lifecycle is tested on a real detached process.
const childEnv = "LEVER_BROKERCTL_TEST_CHILD"

type childOpts struct {
	StateDir, Listen, Admin string
}

func TestMain(m *testing.M) {
	if p := os.Getenv(childEnv); p != "" {
		os.Exit(runChild(p))
	}
	os.Exit(m.Run())
}

func runChild(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var co childOpts
	json.Unmarshal(data, &co)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err = Serve(ctx, Options{StateDir: co.StateDir, Listen: co.Listen, AdminListen: co.Admin,
		SANIPs: []net.IP{net.ParseIP("127.0.0.1")}, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		return 1
	}
	return 0
}

func childStart(t *testing.T, state string) StartOptions {
	t.Helper()
	p := filepath.Join(t.TempDir(), "child.json")
	data, _ := json.Marshal(childOpts{StateDir: state, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0"})
	os.WriteFile(p, data, 0o600)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return StartOptions{Argv: []string{exe, "-test.run=^$"}, Env: append(os.Environ(), childEnv+"="+p), Timeout: 20 * time.Second}
}

func TestLifecycle(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	ctx := context.Background()
	so := childStart(t, state)
	st, err := Start(ctx, state, so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Stop(ctx, state, 2*time.Second) })
	if !st.Running || st.State == nil || st.State.Listen == "" || st.State.ServerCertNotAfter.Before(time.Now()) {
		t.Fatalf("after start: %+v", st)
	}
	if st.PID == os.Getpid() {
		t.Fatal("broker runs in the test process, not detached")
	}
	// Detached: its own session.
	if sid, _ := unix.Getsid(st.PID); sid != st.PID {
		t.Errorf("broker session id %d, want its own (%d)", sid, st.PID)
	}
	// The broker really answers at the published address.
	if c, err := net.Dial("tcp", st.State.Listen); err != nil {
		t.Fatalf("dialing %s: %v", st.State.Listen, err)
	} else {
		c.Close()
	}
	// Start again: the running broker is reported, no second one started.
	again, err := Start(ctx, state, so)
	if err != nil || again.PID != st.PID {
		t.Fatalf("second start: %+v %v", again, err)
	}
	// A foreground serve on the same state refuses.
	err = Serve(ctx, Options{StateDir: state, Listen: "127.0.0.1:0", SANNames: []string{"x"}})
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second serve: %v", err)
	}
	// The admin client finds it through the state files.
	adm, err := AdminFor(state)
	if err != nil {
		t.Fatal(err)
	}
	rot, err := adm.Rotate(ctx)
	if err != nil || rot.ServerCertSerial == st.State.ServerCertSerial {
		t.Fatalf("rotate: %+v %v", rot, err)
	}
	if s2, _ := Status(state); s2.State.ServerCertSerial != rot.ServerCertSerial {
		t.Error("state file not updated after rotate")
	}
	if _, err := Stop(ctx, state, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s, _ := Status(state); s.Running || s.Stale {
		t.Fatalf("after stop: %+v", s)
	}
	if _, err := os.Stat(pidPath(state)); !os.IsNotExist(err) {
		t.Error("pid file left after stop")
	}
}

// A pid file is never trusted: a dead pid, a reused pid (another process, other start
// time) and a live process running something else are all reported stale, and Stop
// signals none of them (the test process itself stands in for an innocent process).
func TestStalePid(t *testing.T) {
	me := os.Getpid()
	ticks, argv, err := procIdentity(me)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rec  pidRecord
		want string
	}{
		{"dead pid", pidRecord{PID: 1 << 22, StartTicks: 1, Argv: argv}, "is not running"},
		{"reused pid", pidRecord{PID: me, StartTicks: ticks + 1, Argv: argv}, "another process"},
		{"other command", pidRecord{PID: me, StartTicks: ticks, Argv: []string{"/usr/bin/lever", "broker", "serve"}}, "not the recorded broker command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			os.MkdirAll(brokerDir(state), 0o700)
			data, _ := json.Marshal(tc.rec)
			os.WriteFile(pidPath(state), data, 0o600)
			st, err := Status(state)
			if err != nil || st.Running || !st.Stale || !strings.Contains(st.StaleReason, tc.want) {
				t.Fatalf("status %+v %v, want stale %q", st, err, tc.want)
			}
			// Stop clears it without signalling (we are still alive to check).
			if _, err := Stop(context.Background(), state, time.Second); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(pidPath(state)); !os.IsNotExist(err) {
				t.Error("stale pid file not removed")
			}
		})
	}
	// The genuine record of a live process is trusted.
	state := t.TempDir()
	os.MkdirAll(brokerDir(state), 0o700)
	data, _ := json.Marshal(pidRecord{PID: me, StartTicks: ticks, Argv: argv})
	os.WriteFile(pidPath(state), data, 0o600)
	if st, _ := Status(state); !st.Running || st.PID != me {
		t.Fatalf("genuine record: %+v", st)
	}
	// Start over a stale pid file replaces it with a real broker.
	state = filepath.Join(t.TempDir(), "state")
	os.MkdirAll(brokerDir(state), 0o700)
	data, _ = json.Marshal(pidRecord{PID: me, StartTicks: ticks + 7, Argv: argv})
	os.WriteFile(pidPath(state), data, 0o600)
	st, err := Start(context.Background(), state, childStart(t, state))
	if err != nil {
		t.Fatal(err)
	}
	defer Stop(context.Background(), state, 2*time.Second)
	if !st.Running || st.PID == me {
		t.Fatalf("start over stale: %+v", st)
	}
}

func TestStartReportsChildFailure(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	so := childStart(t, state)
	// Make the child fail: a non-loopback admin address.
	p := strings.TrimPrefix(so.Env[len(so.Env)-1], childEnv+"=")
	data, _ := json.Marshal(childOpts{StateDir: state, Listen: "127.0.0.1:0", Admin: "0.0.0.0:0"})
	os.WriteFile(p, data, 0o600)
	_, err := Start(context.Background(), state, so)
	if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("got %v, want the child's error", err)
	}
}
