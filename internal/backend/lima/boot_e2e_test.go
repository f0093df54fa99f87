//go:build e2e

package lima

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/testutil"
)

// bootSpan reads the host agent's two logs (Lima's ha.stderr.log and ha.stdout.log, one
// JSON object a line) and returns the last boot's span: from the last "Starting QEMU" in
// the log to the first event after it that reports the VM running (READY). The clock is
// Lima's own, so lever's steps before and after the boot are not counted.
func bootSpan(stderrLog, events string) (time.Duration, bool) {
	type line struct {
		Msg    string    `json:"msg"`
		Time   time.Time `json:"time"`
		Status struct {
			Running bool `json:"running"`
		} `json:"status"`
	}
	each := func(log string, f func(line)) {
		sc := bufio.NewScanner(strings.NewReader(log))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l line
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				f(l)
			}
		}
	}
	var start, ready time.Time
	each(stderrLog, func(l line) {
		if strings.HasPrefix(l.Msg, "Starting QEMU") {
			start = l.Time
		}
	})
	each(events, func(l line) {
		if l.Status.Running && ready.IsZero() && !start.IsZero() && l.Time.After(start) {
			ready = l.Time
		}
	})
	if start.IsZero() || ready.IsZero() {
		return 0, false
	}
	return ready.Sub(start), true
}

func TestBootSpan(t *testing.T) {
	stderr := `{"level":"info","msg":"Starting QEMU (hint: ...)","time":"2026-12-05T08:00:00Z"}
not json
{"level":"info","msg":"SSH Local Port: 1","time":"2026-12-05T08:00:01Z"}
{"level":"info","msg":"Starting QEMU (hint: ...)","time":"2026-12-05T09:00:00Z"}
`
	events := `{"time":"2026-12-05T08:00:00.1Z","status":{"sshLocalPort":1}}
{"time":"2026-12-05T08:00:40Z","status":{"running":true,"sshLocalPort":1}}
{"time":"2026-12-05T08:10:00Z","status":{"exiting":true}}
{"time":"2026-12-05T09:00:12.5Z","status":{"running":true,"sshLocalPort":1}}
{"time":"2026-12-05T09:00:13Z","status":{"running":true,"sshLocalPort":1}}
`
	first := strings.SplitN(stderr, "\n", 4)
	for _, c := range []struct {
		name, stderr, events string
		want                 time.Duration
		ok                   bool
	}{
		{"the last boot counts, to its first running event", stderr, events, 12500 * time.Millisecond, true},
		{"one boot", strings.Join(first[:3], "\n"), events, 40 * time.Second, true},
		{"never running", stderr, `{"time":"2026-12-05T09:00:01Z","status":{"sshLocalPort":1}}`, 0, false},
		{"no start", "", events, 0, false},
	} {
		got, ok := bootSpan(c.stderr, c.events)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: bootSpan = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// qemuCPU is the CPU time (user + system) the VM owner's qemu has used so far, in seconds:
// under TCG the guest's boot is CPU-bound, so this is the boot's cost whatever else the
// machine is running.
func (e *limaEnv) qemuCPU(t *testing.T) float64 {
	out, _, _ := e.as(t, "pgrep", "-u", strconv.Itoa(e.uid), "qemu-system")
	var sum float64
	for _, p := range strings.Fields(out) {
		b, err := os.ReadFile("/proc/" + p + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		u, _ := strconv.ParseFloat(f[11], 64)
		k, _ := strconv.ParseFloat(f[12], 64)
		sum += (u + k) / 100 // USER_HZ
	}
	return sum
}

// TestLimaBootMeasured measures what issue 30 asks about on the machine it runs on: the
// cold boot and the restart (lever stop, then a bring-up) of the guest image, each as
// Lima's own boot span (Starting QEMU to READY), lever's whole call, qemu's CPU seconds,
// and systemd's view from inside (systemd-analyze time, blame, critical-chain). It only
// runs when asked (LEVER_LIMA_BOOT_MEASURE=1): it is a measurement, docs/benchmarks-vm.md
// records its figures. LEVER_LIMA_IMAGE_DIR picks the image, so two images are compared
// in one run on one machine.
func TestLimaBootMeasured(t *testing.T) {
	if os.Getenv("LEVER_LIMA_BOOT_MEASURE") == "" {
		t.Skip("a measurement: set LEVER_LIMA_BOOT_MEASURE=1")
	}
	testutil.LockVM(t)
	e := newLimaEnv(t)
	inst := e.home + "/.lima/" + e.vm
	measure := func(what string, args ...string) {
		s := time.Now()
		if _, _, code := e.leverRun(t, args...); code != 0 {
			out, _ := e.guest(t, "sudo journalctl -b --no-pager -u lever-cidata -u lever-cidata-boot -u lima-guestagent | tail -60; ls -l /dev/virtio-ports/")
			t.Fatalf("%s: lever %v exited %d; the guest's journal:\n%s", what, args, code, out)
		}
		total := time.Since(s)
		cpu := e.qemuCPU(t)
		se, _ := os.ReadFile(inst + "/ha.stderr.log")
		ev, _ := os.ReadFile(inst + "/ha.stdout.log")
		boot, ok := bootSpan(string(se), string(ev))
		if !ok {
			t.Errorf("%s: no boot span in %s/ha.std{err,out}.log", what, inst)
		}
		out, _ := e.guest(t, "systemd-analyze time; systemd-analyze blame --no-pager | head -25; systemd-analyze critical-chain --no-pager")
		t.Logf("BENCH %s: boot %.1fs (Starting QEMU to READY), lever %.1fs, qemu CPU %.0fs so far\n%s", what, boot.Seconds(), total.Seconds(), cpu, out)
	}
	measure("cold", "egress", "apply")
	if _, _, code := e.leverRun(t, "stop"); code != 0 {
		t.Fatalf("lever stop exited %d", code)
	}
	measure("restart", "egress", "apply")
	if os.Getenv("LEVER_LIMA_SUSPEND_PROBE") != "" {
		e.probeSuspend(t, measure)
	}
}

// probeSuspend tries what Lima v1.2 offers towards a suspend (docs/bringup.md, "A restart
// is a boot"): its snapshots are qemu's savevm/loadvm over the monitor while the VM runs,
// and qemu-img snapshot on the disk while it is stopped. Each step's outcome is logged.
func (e *limaEnv) probeSuspend(t *testing.T, measure func(string, ...string)) {
	timed := func(argv ...string) {
		s := time.Now()
		o, er, code := e.as(t, argv...)
		t.Logf("PROBE %v: exit %d in %.1fs\n%s%s", argv, code, time.Since(s).Seconds(), o, er)
	}
	look := func(what string) {
		out, code := e.guest(t, "cat /proc/uptime; date -u +%s; findmnt -n -o FSTYPE /lever; ls /lever >/dev/null && echo tree-readable; sudo cmp -s /run/lima-boot-done /mnt/lima-cidata/meta-data && echo boot-done-current")
		t.Logf("PROBE %s: host %d, guest exit %d:\n%s", what, time.Now().Unix(), code, out)
	}
	// 1. Running: savevm (VM state into the qcow2), then loadvm into the same qemu.
	timed("limactl", "snapshot", "create", "--tag", "lever-s", e.vm)
	timed("limactl", "snapshot", "list", e.vm)
	e.guest(t, "echo after-save | sudo tee /var/lib/lever-probe >/dev/null")
	time.Sleep(10 * time.Second)
	timed("limactl", "snapshot", "apply", "--tag", "lever-s", e.vm)
	look("after loadvm in the running qemu")
	if out, _ := e.guest(t, "cat /var/lib/lever-probe 2>&1"); true {
		t.Logf("PROBE a file written after the save, after loadvm: %q", out)
	}
	// 2. Stopped: the tag stays in the disk; a start boots from the disk (no -loadvm).
	if _, _, code := e.leverRun(t, "stop"); code != 0 {
		t.Fatalf("lever stop exited %d", code)
	}
	timed("limactl", "snapshot", "list", e.vm)
	timed("limactl", "snapshot", "apply", "--tag", "lever-s", e.vm)
	measure("start after a stopped snapshot apply", "egress", "apply")
	look("after start")
}
