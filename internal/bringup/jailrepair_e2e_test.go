//go:build e2e

package bringup_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/bringup"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/testutil"
)

// repairRunUser is this test's own run user (its podman and /run/user/<uid> are host
// state on the netns substrate, shared with any other test under the same name).
const repairRunUser = "lvtbrp"

// execAs runs argv in container name as runUser's podman exec; combined output, exit code.
func execAs(t *testing.T, runUser, guestNS, name string, argv ...string) (string, int) {
	t.Helper()
	uid := strings.TrimSpace(sh(t, "id", "-u", runUser))
	args := []string{"--net=/run/netns/" + guestNS, "runuser", "-u", runUser, "--",
		"env", "XDG_RUNTIME_DIR=/run/user/" + uid, "HOME=/home/" + runUser, "podman", "exec", name}
	out, err := exec.Command("nsenter", append(args, argv...)...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("podman exec %s: %v", name, err)
	}
	return string(out), code
}

// containerPid is container name's process in the guest.
func containerPid(t *testing.T, guestNS, name string) int {
	t.Helper()
	uid := strings.TrimSpace(sh(t, "id", "-u", repairRunUser))
	out := sh(t, "nsenter", "--net=/run/netns/"+guestNS, "runuser", "-u", repairRunUser, "--",
		"env", "XDG_RUNTIME_DIR=/run/user/"+uid, "HOME=/home/"+repairRunUser, "podman", "inspect", "-f", "{{.State.Pid}}", name)
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || pid <= 0 {
		t.Fatalf("container %s has no process: %q", name, out)
	}
	return pid
}

// repairJail brings up a jail whose lever.yaml lies in its tree (so read-only for the
// agents), with its own run user; it returns the config path, the guest namespace and
// the manager's container name.
func repairJail(t *testing.T) (cfgPath, guestNS, mgr string) {
	dir, proj, sfx := netnsProject(t, "lvtb")
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte("sk-lvrp-"+sfx+"\n"), 0o600)
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	cfgPath = filepath.Join(proj, "lever.yaml")
	y := testutil.NetnsYAML("r"+sfx, keyFile, srv.URL, freePort(t), freePort(t))
	y.Tree = "."
	y.Write(t, cfgPath)
	// writable by anyone, so that only the read-only mount stands between the agent's
	// uid and it (the positive control below writes it through a detached mount)
	os.Chmod(cfgPath, 0o666)
	t.Setenv(netns.RunUserEnv, repairRunUser)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lever(t, "destroy", "-c", cfgPath)
		if be, err := backend.New(cfg); err == nil {
			bringup.TeardownInPlace(context.Background(), be)
		}
	})
	out, code := lever(t, "up", "-c", cfgPath)
	if code != 0 {
		t.Fatalf("up: exit %d\n%s", code, out)
	}
	return cfgPath, "lvtbr" + sfx, "lever-r" + sfx + "-manager"
}

// renameSave is what sed -i and most editors do: the new content in a temp file beside
// the old, renamed over it (a new inode at the path).
func renameSave(t *testing.T, p string, content []byte) {
	t.Helper()
	tmp := p + ".tmp-save"
	if err := os.WriteFile(tmp, content, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o666)
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// TestJailRepairNetns: a warm `lever up` finds what broke in a running jail since the last
// one, and repairs it without --fresh.
func TestJailRepairNetns(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	cfgPath, guestNS, mgr := repairJail(t)
	mgrB := containers.BenchName(mgr)

	// A rename-save of lever.yaml on the host (issue 27, item 18) detaches its read-only
	// mount in the running containers: they see the new file through their writable
	// tree. Every up proves the running containers' mounts again (in its one observation
	// call) and restarts those whose mounts are not the planned ones.
	t.Run("read-only lever.yaml after a rename-save", func(t *testing.T) {
		// The container's own view, from the guest (the lev container has no shell):
		// opened for appending through /proc/PID/root, which a read-only mount refuses
		// even to root; appending nothing changes no byte. In the workbench, the agent's
		// own way too: a shell there.
		canWrite := func(name string) bool {
			t.Helper()
			p := fmt.Sprintf("/proc/%d/root/lever/lever.yaml", containerPid(t, guestNS, name))
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				f.Close()
			} else if !errors.Is(err, syscall.EROFS) {
				t.Fatalf("%s: opening %s failed, not for a read-only mount: %v", name, p, err)
			}
			if name == mgrB {
				out, code := execAs(t, repairRunUser, guestNS, name, "/bin/sh", "-c", ": >> /lever/lever.yaml")
				if code != 0 && !strings.Contains(out, "Read-only file system") {
					t.Fatalf("%s: writing /lever/lever.yaml failed, not for its read-only mount (exit %d): %s", name, code, out)
				}
				if (code == 0) != (err == nil) {
					t.Fatalf("%s: its shell and the guest disagree on whether /lever/lever.yaml is writable (%d, %v)", name, code, err)
				}
			}
			return err == nil
		}
		seen := func(name string) string {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/root/lever/lever.yaml", containerPid(t, guestNS, name)))
			return string(b)
		}
		old, _ := os.ReadFile(cfgPath)
		edited := append(append([]byte(nil), old...), []byte("# edited by a rename-save\n")...)
		renameSave(t, cfgPath, edited)
		// Positive control: the rename detached the mount in the running containers: they
		// see the new file, writable. (If this stops holding, the kernel keeps such mounts
		// and the test below proves nothing.)
		for _, c := range []string{mgr, mgrB} {
			if out := seen(c); !strings.Contains(out, "# edited by a rename-save") {
				t.Fatalf("control: %s does not see the renamed-in lever.yaml:\n%s", c, out)
			}
			if !canWrite(c) {
				t.Fatalf("control: %s cannot write /lever/lever.yaml after the rename-save: the mount was not detached", c)
			}
		}
		out, code := lever(t, "up", "--accept-config", "-c", cfgPath)
		if code != 0 {
			t.Fatalf("up --accept-config: exit %d\n%s", code, out)
		}
		for _, c := range []string{mgr, mgrB} {
			if canWrite(c) {
				t.Errorf("%s can still write /lever/lever.yaml after up --accept-config:\n%s", c, out)
			}
			if got := seen(c); got != string(edited) {
				t.Errorf("%s sees another lever.yaml than the host's:\n%s", c, got)
			}
		}
		if !strings.Contains(out, "restart") {
			t.Errorf("up --accept-config does not say it restarted the containers:\n%s", out)
		}
		// Proven and unchanged now: a warm up is one guest call again (the proof rides
		// in the observation) and restarts nothing.
		if res := applyJSON(t, cfgPath); res.Changed || res.GuestCalls != 1 {
			t.Errorf("warm up after the repair: changed %v, %d guest calls (want false, 1)", res.Changed, res.GuestCalls)
		}
	})

	// The workbench's exec channel (issue 27, item 16). The attack: a process in the
	// workbench removes the channel's socket and listens there itself, answering lev's
	// later tool calls (levstub's __impostor). Through `lever shell` it cannot: the session
	// runs where the channel's directory is covered (lev bench shell). Control: the same
	// payload in the same container through a bare podman exec (what lever shell ran
	// before) takes the socket; lever status then reports the channel, and a warm up
	// (no --fresh) restarts the workbench, whose new server answers with its proof again.
	t.Run("the workbench's exec channel", func(t *testing.T) {
		channel := func() (string, bringup.Status) {
			t.Helper()
			out, code := lever(t, "status", "--json", "-c", cfgPath)
			var st bringup.Status
			if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &st); err != nil {
				t.Fatalf("status --json: exit %d, %v\n%s", code, err, out)
			}
			why, ok := st.Channels[mgrB]
			if !ok {
				t.Fatalf("status names no exec channel for %s: %+v (%s)", mgrB, st.Channels, st.MountsError)
			}
			return why, st
		}
		if why, st := channel(); why != "" || !st.Healthy {
			t.Fatalf("before the attack the channel does not prove itself: %q (healthy %v)", why, st.Healthy)
		}
		sock := "/run/lever-bench/exec.sock"
		out, code := lever(t, "shell", "--config", cfgPath, "--", "/lev", "__impostor", sock)
		if code != 3 || !strings.Contains(out, "read-only file system") {
			t.Fatalf("through lever shell the impostor was not refused its place (exit %d):\n%s", code, out)
		}
		if out, code := lever(t, "shell", "--config", cfgPath, "--", "/bin/sh", "-c", "ls -A /run/lever-bench; umount /run/lever-bench"); code == 0 || strings.Contains(out, "exec.sock") || strings.Contains(out, "key") {
			t.Fatalf("a lever shell session sees or uncovers the channel's directory (exit %d):\n%s", code, out)
		}
		// Nor through another process's root: every process the session can name in the
		// container's /proc (the server, lev bench shell's own) is out of its reach.
		// Control: the same script through a bare podman exec reaches the channel.
		viaProc := `for p in /proc/[0-9]*; do ls -A "$p/root/run/lever-bench" 2>/dev/null; cat "$p/root/run/lever-bench/key" 2>/dev/null; done; true`
		if out, _ := lever(t, "shell", "--config", cfgPath, "--", "/bin/sh", "-c", viaProc); strings.Contains(out, "exec.sock") || strings.Contains(out, "key") {
			t.Fatalf("a lever shell session reaches the channel through /proc:\n%s", out)
		}
		if out, _ := execAs(t, repairRunUser, guestNS, mgrB, "/bin/sh", "-c", viaProc); !strings.Contains(out, "exec.sock") {
			t.Fatalf("control: a bare podman exec does not reach the channel through /proc:\n%s", out)
		}
		if why, _ := channel(); why != "" {
			t.Fatalf("after the lever shell attempts the channel does not prove itself: %q", why)
		}
		// Control: unconfined, the same payload takes the socket.
		uid := strings.TrimSpace(sh(t, "id", "-u", repairRunUser))
		sh(t, "nsenter", "--net=/run/netns/"+guestNS, "runuser", "-u", repairRunUser, "--",
			"env", "XDG_RUNTIME_DIR=/run/user/"+uid, "HOME=/home/"+repairRunUser, "podman", "exec", "-d", mgrB, "/lev", "__impostor", sock)
		var why string
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if why, _ = channel(); why != "" {
				break
			}
		}
		if !strings.Contains(why, "carries no proof") {
			t.Fatalf("control: the impostor did not take the socket, or status did not see it: %q", why)
		}
		if out, _ := lever(t, "status", "-c", cfgPath); !strings.Contains(out, "exec channel BROKEN") {
			t.Errorf("lever status does not report the broken channel:\n%s", out)
		}
		out, code = lever(t, "up", "-c", cfgPath)
		if code != 0 || !strings.Contains(out, "restart") {
			t.Fatalf("warm up over the replaced channel: exit %d\n%s", code, out)
		}
		if why, st := channel(); why != "" || !st.Healthy {
			t.Fatalf("after the warm up the channel does not prove itself: %q (healthy %v)", why, st.Healthy)
		}
		if res := applyJSON(t, cfgPath); res.Changed || res.GuestCalls != 1 {
			t.Errorf("warm up after the repair: changed %v, %d guest calls (want false, 1)", res.Changed, res.GuestCalls)
		}
	})
}
