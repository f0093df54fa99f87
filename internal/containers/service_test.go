package containers

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets this test binary stand in for podman in TestServiceScript: with
// LEVER_FAKE_PODMAN set, `podman system service --time=0 unix://SOCK` listens on SOCK
// until killed, and any other podman command succeeds.
func TestMain(m *testing.M) {
	if os.Getenv("LEVER_FAKE_PODMAN") != "" {
		args := os.Args[1:]
		if len(args) == 4 && args[0] == "system" && args[1] == "service" && args[2] == "--time=0" {
			l, err := net.Listen("unix", strings.TrimPrefix(args[3], "unix://"))
			if err != nil {
				os.Exit(1)
			}
			defer l.Close()
			for {
				time.Sleep(time.Hour)
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestServiceScript runs podman-service.sh (what StartService runs as the run user) with
// a real shell and stand-ins for what cannot run here (the user's systemd manager, podman):
// where start-service.sh found the manager in the jail's network namespace
// (LEVER_PODMAN_UNIT=1) the service is a transient unit, its main pid recorded, and a
// second start finds it ready; a unit whose service died is replaced by one of a new name
// (the old name may stay loaded); on the netns substrate (LEVER_PODMAN_UNIT=0) the
// manager is never asked, even though its socket is there, and the service is detached.
func TestServiceScript(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, run, units := filepath.Join(dir, "bin"), filepath.Join(dir, "run"), filepath.Join(dir, "units")
	for _, d := range []string{bin, run + "/systemd", units} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// the user's manager's private socket: the script's sign that it runs
	mgr, err := net.Listen("unix", run+"/systemd/private")
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("podman", "exec "+self+` "$@"`+"\n")
	// systemd-run --user --quiet --collect --unit=NAME -p ... -p ... CMD...: CMD in the
	// background, its pid kept as the unit's main pid, the call recorded
	write("systemd-run", `unit=
while [ $# -gt 0 ]; do case $1 in --unit=*) unit=${1#--unit=}; shift;; -p) shift 2;; --*) shift;; *) break;; esac; done
echo "$unit" >>`+units+`/calls
"$@" </dev/null >/dev/null 2>&1 &
echo $! >`+units+`/"$unit".pid
`)
	write("systemctl", `case "$*" in "--user show -p MainPID --value "*) eval "last=\${$#}"; cat `+units+`/"$last".pid;; *) exit 0;; esac
`)
	script, err := os.ReadFile("scripts/podman-service.sh")
	if err != nil {
		t.Fatal(err)
	}
	start := func(unit string) string {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", string(script))
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "LEVER_FAKE_PODMAN=1", "LEVER_RUNTIME_DIR=" + run, "LEVER_PODMAN_UNIT=" + unit}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("podman-service.sh (LEVER_PODMAN_UNIT=%s): %v\n%s", unit, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	calls := func() []string {
		b, _ := os.ReadFile(units + "/calls")
		return strings.Fields(string(b))
	}
	pid := func() int {
		b, _ := os.ReadFile(run + "/podman/lever-service.pid")
		p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return p
	}
	kill := func() {
		t.Helper()
		p := pid()
		if p <= 0 {
			t.Fatal("no pid recorded")
		}
		syscall.Kill(p, syscall.SIGKILL)
		for i := 0; i < 100 && syscall.Kill(p, 0) == nil; i++ {
			var ws syscall.WaitStatus
			syscall.Wait4(p, &ws, syscall.WNOHANG, nil)
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Cleanup(func() {
		if p := pid(); p > 0 {
			syscall.Kill(p, syscall.SIGKILL)
		}
	})

	if got := start("1"); got != "started" {
		t.Fatalf("first start: %q", got)
	}
	first := calls()
	if len(first) != 1 || !strings.HasPrefix(first[0], "lever-podman-") || !strings.HasSuffix(first[0], ".service") {
		t.Fatalf("systemd-run calls %v: want one transient unit lever-podman-<id>.service", first)
	}
	if b, _ := os.ReadFile(units + "/" + first[0] + ".pid"); strings.TrimSpace(string(b)) != strconv.Itoa(pid()) || pid() <= 0 {
		t.Fatalf("pid file %d, the unit's main pid %s", pid(), b)
	}
	if got := start("1"); got != "ready" || len(calls()) != 1 {
		t.Fatalf("second start: %q, systemd-run calls %v (want ready, no new unit)", got, calls())
	}
	// the service died, its socket left behind: a new unit of a new name
	kill()
	if got := start("1"); got != "started" {
		t.Fatalf("start after the service died: %q", got)
	}
	if c := calls(); len(c) != 2 || c[1] == c[0] {
		t.Fatalf("systemd-run calls %v: want a second unit of another name", c)
	}

	// the netns substrate: the manager's socket is there, but it is not the jail's
	kill()
	os.Remove(run + "/podman/podman.sock")
	if got := start("0"); got != "started" {
		t.Fatalf("detached start: %q", got)
	}
	if c := calls(); len(c) != 2 {
		t.Fatalf("LEVER_PODMAN_UNIT=0 asked the user's manager: systemd-run calls %v", c)
	}
	if p := pid(); p <= 0 || syscall.Kill(p, 0) != nil {
		t.Fatalf("the detached service's pid %d is not alive", p)
	}

	// Stop, then start at once (what moving the service, a restart or a test does): the
	// stop returns with the service gone and its socket removed, so the start launches a new
	// service. The stand-in, like a podman killed mid-shutdown, leaves its socket when it
	// dies of SIGTERM; a stop that only signalled left that socket without a pid file, which
	// the start takes for systemd's podman.socket and answers "ready" with nothing serving.
	stopScript, err := os.ReadFile("scripts/stop-service.sh")
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", string(stopScript))
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LEVER_RUNTIME_DIR=" + run}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("stop-service.sh: %v\n%s", err, out)
		}
	}
	old := pid()
	stop()
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(old) + "/status"); err == nil && !strings.Contains(string(st), "\nState:\tZ") {
		t.Fatalf("stop returned with the service %d still running", old)
	}
	for _, f := range []string{run + "/podman/podman.sock", run + "/podman/lever-service.pid"} {
		if _, err := os.Lstat(f); err == nil {
			t.Fatalf("stop left %s", f)
		}
	}
	if got := start("0"); got != "started" {
		t.Fatalf("start right after a stop: %q (want started: a new service)", got)
	}
	if p := pid(); p <= 0 || p == old || syscall.Kill(p, 0) != nil {
		t.Fatalf("the service started after the stop: pid %d (stopped: %d)", p, old)
	}
	// control: stopping when nothing was started is a no-op that succeeds
	stop()
	stop()
}
