//go:build e2e

package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/bench"
)

// TestBenchTwoContainers: the contract's layout with rootless podman (the fixture's test
// user, --userns keep-id, every capability dropped, no-new-privileges, read-only root).
// Container B (the workbench) runs `lev bench serve`; container A (lev's) runs the real
// `lev run` of a scripted agent whose shell tool must run in B: the two share only the
// socket directory and the workdir. B alone mounts /where (saying "bench"), so a command
// that reads it ran in B; A has --network none and no /where. Rows: network off (the
// command's interfaces are only a loopback of its own) and on (B's network), and the
// control without LEV_BENCH_SOCKET, where the same command runs in A and finds no /where.
func TestBenchTwoContainers(t *testing.T) {
	f := podmanFixture(t)
	lev := filepath.Join(f.root, "lev")
	build := exec.Command("go", "build", "-o", lev, "github.com/lever-jail/lever/cmd/lev")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	os.Chmod(lev, 0o755)
	sockDir, where := f.workdir(t), f.workdir(t)
	os.Chmod(sockDir, 0o700)
	os.WriteFile(filepath.Join(where, "where"), []byte("bench"), 0o644)
	var rb [3]byte
	rand.Read(rb[:])
	name := "lvtsbx-bench-" + hex.EncodeToString(rb[:])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	podman := func(args ...string) (string, error) {
		return f.asUser(append([]string{"podman", "--runtime", rootlessRuntime}, args...)...)
	}
	hardening := []string{"--cap-drop=ALL", "--security-opt", "no-new-privileges", "--read-only", "--userns", "keep-id", "--pids-limit", "64"}
	// B shares the workdirs' parent so every row's workdir is there at the same path.
	wdRoot := f.workdir(t)
	// The guest's network namespace, as the contract runs the workbench.
	argvB := append(append([]string{"run", "-d", "--name", name, "--network", "host"}, hardening...),
		"-v", sockDir+":/run/lever-bench:rw", "-v", wdRoot+":"+wdRoot+":rw", "-v", where+":/where:ro", "-v", lev+":/lev:ro",
		"--entrypoint", "/lev", f.image, "bench", "serve", "--socket", "/run/lever-bench/exec.sock")
	if out, err := podman(argvB...); err != nil {
		t.Fatalf("starting the workbench: %v %s", err, out)
	}
	defer podman("rm", "-f", name)
	sock := filepath.Join(sockDir, "exec.sock")
	for i := 0; ; i++ {
		if fi, err := os.Stat(sock); err == nil && fi.Mode().Type() == os.ModeSocket && fi.Mode().Perm() == 0o600 {
			break
		}
		if i > 100 || ctx.Err() != nil {
			logs, _ := podman("logs", name)
			t.Fatalf("the workbench's socket never appeared 0600: %s", logs)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// What a command in B finds of the socket: its directory empty, no way through any
	// process's /proc/<pid>/root, no unmount; and it runs as the run user (keep-id).
	// Control: the host (this test) does see the socket there.
	t.Run("the socket is out of the commands' reach", func(t *testing.T) {
		on := true
		probe := `ls -A /run/lever-bench; for p in /proc/[0-9]*; do ls -A "$p/root/run/lever-bench" 2>/dev/null; done; umount /run/lever-bench 2>/dev/null && echo UNMOUNTED; id -u`
		r, err := bench.Client{Socket: sock}.Run(ctx, bench.Request{Argv: []string{"/bin/sh", "-c", probe}, Dir: "/", Env: []string{"PATH=/bin"},
			DeadlineMS: 20000, Network: &on, StdoutMax: 4096, StderrMax: 4096})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%+v %v", r, err)
		}
		if got := strings.TrimSpace(string(r.Stdout)); got != strconv.Itoa(f.uid) {
			t.Fatalf("the command saw %q (want only its uid %d: no exec.sock, no unmount)", got, f.uid)
		}
		// the socket and this start's key (bench.KeyFile), which the command did not see either
		if ents, _ := os.ReadDir(sockDir); len(ents) != 2 || ents[0].Name() != "exec.sock" || ents[1].Name() != bench.KeyFile {
			t.Fatalf("control: the socket directory holds %v", ents)
		}
	})

	cases := []struct {
		name     string
		bench    bool
		network  bool
		seen     string
		loopOnly bool
	}{
		{"network off", true, false, "bench", true},
		{"network on", true, true, "bench", false},
		{"no LEV_BENCH_SOCKET: runs in lev's container (control)", false, true, "", false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wd := filepath.Join(wdRoot, fmt.Sprintf("wd%d", i))
			home := f.workdir(t)
			for _, d := range []string{wd, filepath.Join(home, "agents")} {
				os.MkdirAll(d, 0o755)
				os.Chown(d, f.uid, f.gid)
			}
			files := map[string]string{
				"token": "0123456789abcdef0123\n",
				"script.toml": `
[[rule]]
stage = "work"
turn = 1
[[rule.call]]
tool = "shell"
args = '{"command": "cat /where/where > seen.txt; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d \" \" | sort | tr \"\\n\" \" \" > ifaces.txt"}'
[[rule]]
stage = "work"
turn = 2
[[rule.call]]
tool = "submit_output"
args = '{"output": "done"}'
`,
				"agents/worker.toml": "name = \"worker\"\nversion = \"1\"\n[stages.work]\ntools = [\"shell\", \"submit_output\"]\n",
				"config.toml":        fmt.Sprintf("[daemon]\nlisten = \"127.0.0.1:47%03d\"\n[provider]\nkind = \"scripted\"\nscript = \"/levhome/script.toml\"\n[tool_permissions]\nshell = \"allow\"\n[sandbox]\nkind = \"none\"\nnetwork = %v\n", 100+i, tc.network),
			}
			for p, body := range files {
				full := filepath.Join(home, p)
				os.WriteFile(full, []byte(body), 0o600)
				os.Chown(full, f.uid, f.gid)
			}
			argvA := append(append([]string{"run", "--rm", "--network", "none"}, hardening...),
				"--tmpfs", "/tmp", "-v", wdRoot+":"+wdRoot+":rw", "-v", home+":/levhome:rw", "-v", lev+":/lev:ro",
				"-e", "LEV_HOME=/levhome", "-e", "HOME=/tmp")
			if tc.bench {
				argvA = append(argvA, "-v", sockDir+":/run/lever-bench:rw", "-e", "LEV_BENCH_SOCKET=/run/lever-bench/exec.sock")
			}
			argvA = append(argvA, "--entrypoint", "/lev", f.image, "run", "worker", "--workdir", wd)
			out, err := podman(argvA...)
			if err != nil {
				logs, _ := podman("logs", name)
				t.Fatalf("lev run in container A: %v\n%s\nworkbench log:\n%s", err, out, logs)
			}
			calls, _ := filepath.Glob(filepath.Join(home, "runs", "*", "stages", "0", "tool_calls.jsonl"))
			var rec []byte
			if len(calls) == 1 {
				rec, _ = os.ReadFile(calls[0])
			}
			if !strings.Contains(string(rec), `"shell"`) {
				t.Fatalf("no shell call in the run's record %v: %s (lev run: %s)", calls, rec, out)
			}
			t.Logf("shell call record: %.400s", rec)
			seen, _ := os.ReadFile(filepath.Join(wd, "seen.txt"))
			ifaces, _ := os.ReadFile(filepath.Join(wd, "ifaces.txt"))
			if string(seen) != tc.seen {
				t.Fatalf("the shell command read /where = %q, want %q (lev run: %s)", seen, tc.seen, out)
			}
			got := strings.TrimSpace(string(ifaces))
			if tc.bench && tc.loopOnly != (got == "lo") {
				t.Fatalf("network=%v: the command's interfaces are %q", tc.network, got)
			}
			t.Logf("interfaces seen by the command: %q", got)
		})
	}
}
