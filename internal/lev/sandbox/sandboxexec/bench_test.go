package sandboxexec

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/testutil"

	"github.com/lever-jail/lever/internal/lev/bench"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

// These tests put lev's shell tool (a real run: runner engine, scripted provider,
// pipeline, this package's Factory reading LEV_BENCH_SOCKET) against the built
// `lev bench serve` running in a mount namespace of its own, where the directory
// "shadow" holds a file saying "bench" while lev's side of it says "lev". What a shell
// command reads from there says where it ran. The workdir is shared by both, as the tree
// is shared by the lev and workbench containers.

func buildLev(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lev")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/lever-jail/lever/cmd/lev")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type benchFixture struct {
	dir, shadow, sock string
}

func startBench(t *testing.T) benchFixture {
	t.Helper()
	testutil.RequireTool(t, "unshare") // under CI=true a missing unshare fails, never skips
	lev := buildLev(t)
	f := benchFixture{dir: t.TempDir()}
	f.shadow = filepath.Join(f.dir, "shadow")
	os.MkdirAll(f.shadow, 0o755)
	os.WriteFile(filepath.Join(f.shadow, "where"), []byte("lev"), 0o644)
	sockDir := filepath.Join(f.dir, "benchsock")
	os.MkdirAll(sockDir, 0o700)
	f.sock = filepath.Join(sockDir, "exec.sock")
	script := `mount -t tmpfs tmpfs "$1" && echo -n bench > "$1/where" && exec "$2" bench serve --socket "$3"`
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", "--propagation", "private",
		"sh", "-c", script, "sh", f.shadow, lev, f.sock)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	logf, _ := os.Create(filepath.Join(f.dir, "serve.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("bench log:\n%s", b)
		}
	})
	// Polled for up to 30 s: a binary's start on a loaded machine can take seconds.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if c, err := net.Dial("unix", f.sock); err == nil {
			c.Close()
			return f
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(logf.Name())
	t.Fatalf("bench did not start: %s", b)
	return f
}

const benchBlueprint = `name = "bb"
version = "1.0.0"
[stages.one]
prompt = "a"
tools = ["shell", "submit_output"]
`

func runThrough(t *testing.T, f benchFixture, cfgExtra string) (*runner.Record, string, error) {
	t.Helper()
	dir := t.TempDir()
	wd := filepath.Join(dir, "wd")
	os.MkdirAll(wd, 0o755)
	os.MkdirAll(filepath.Join(dir, "agents"), 0o755)
	os.WriteFile(filepath.Join(dir, "agents", "bb.toml"), []byte(benchBlueprint), 0o644)
	os.WriteFile(filepath.Join(dir, "script.toml"), []byte(strings.ReplaceAll(modelScript("bench-script.toml"), "SHADOW", f.shadow)), 0o644)
	sc, _ := json.Marshal(filepath.Join(dir, "script.toml"))
	cfg, err := levconfig.Parse(filepath.Join(dir, "config.toml"), []byte("[provider]\nkind = \"scripted\"\nscript = "+string(sc)+"\n[tool_permissions]\nshell = \"allow\"\n"+cfgExtra))
	if err != nil {
		t.Fatal(err)
	}
	eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(dir, "lev", "runs")}, AgentsDir: filepath.Join(dir, "agents"),
		Config: func() *levconfig.Config { return cfg }, Home: dir, Log: t.Logf,
		NewGate: taintgate.Factory, NewExecutor: Factory}
	rec, err := eng.Start(context.Background(), runner.Spec{Agent: "bb", Workdir: wd})
	if err != nil {
		return nil, wd, err
	}
	eng.Wait()
	rec, _ = eng.Store.Load(rec.ID)
	return rec, wd, nil
}

// TestShellToolRunsInBench: with LEV_BENCH_SOCKET set, the shell tool's command runs in
// the workbench for every [sandbox] kind (it reads the bench's "shadow", and writes the
// shared workdir), never in lev's own mount namespace; without it (control) the same run
// reads lev's.
func TestShellToolRunsInBench(t *testing.T) {
	f := startBench(t)
	cases := []struct {
		name, cfg string
		bench     bool
		want      string
	}{
		{"no bench: runs beside lev (control)", "[sandbox]\nkind = \"none\"\n", false, "lev"},
		{"kind none", "[sandbox]\nkind = \"none\"\n", true, "bench"},
		{"kind namespace, network off", "[sandbox]\nkind = \"namespace\"\nnetwork = false\n", true, "bench"},
		{"kind container, engine absent here", "[sandbox]\nkind = \"container\"\nimage = \"localhost/none:x\"\nengine = \"lvtsbx-no-engine\"\nnetwork = false\n", true, "bench"},
		{"warn fallback never runs beside lev", "[sandbox]\nkind = \"container\"\nimage = \"localhost/none:x\"\nengine = \"lvtsbx-no-engine\"\non_unavailable = \"warn\"\n", true, "bench"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bench {
				t.Setenv(bench.Env, f.sock)
			} else {
				t.Setenv(bench.Env, "")
			}
			rec, wd, err := runThrough(t, f, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != runner.StatusCompleted {
				t.Fatalf("run %s: %s", rec.Status, rec.Error)
			}
			seen, _ := os.ReadFile(filepath.Join(wd, "seen.txt"))
			made, _ := os.ReadFile(filepath.Join(wd, "made.txt"))
			if string(seen) != tc.want || strings.TrimSpace(string(made)) != "made-in-bench" {
				t.Fatalf("the command saw %q (want %q) and wrote %q", seen, tc.want, made)
			}
		})
	}
}

// TestBenchMissingFailsSpawn: a bench that is not there fails the run's spawn with an
// error naming the socket and `lever up`, whatever on_unavailable says, and nothing runs
// beside lev (the command would write seen.txt).
func TestBenchMissingFailsSpawn(t *testing.T) {
	f := benchFixture{dir: t.TempDir()}
	f.shadow = filepath.Join(f.dir, "shadow")
	for _, tc := range []struct{ name, sock, cfg string }{
		{"no socket", filepath.Join(f.dir, "gone.sock"), "[sandbox]\nkind = \"none\"\n"},
		{"no socket, warn", filepath.Join(f.dir, "gone.sock"), "[sandbox]\nkind = \"namespace\"\non_unavailable = \"warn\"\n"},
		{"refused (stale socket)", staleSocket(t, f.dir), "[sandbox]\nkind = \"none\"\n"},
		{"not a socket", filepath.Join(f.dir, "shadow"), "[sandbox]\nkind = \"none\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.MkdirAll(f.shadow, 0o755)
			t.Setenv(bench.Env, tc.sock)
			_, wd, err := runThrough(t, f, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.sock) || !strings.Contains(err.Error(), "lever up") {
				t.Fatalf("spawn error: %v", err)
			}
			if _, err := os.Stat(filepath.Join(wd, "seen.txt")); err == nil {
				t.Fatal("the command ran although the bench is not there")
			}
		})
	}
}

func staleSocket(t *testing.T, dir string) string {
	p := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	return p
}

// TestBenchExecutorDirect: the executor's own refusals and its output handling through
// the pipeline's capped buffers.
func TestBenchExecutorDirect(t *testing.T) {
	f := startBench(t)
	wd := t.TempDir()
	x := &Executor{m: sandbox.NewManager(sandbox.Options{BenchSocket: f.sock}), workdir: wd, log: t.Logf, warned: map[string]bool{}}
	ctx := context.Background()
	shell := func(cmd string, mask []string, timeout time.Duration) (pipeline.ShellResult, error) {
		return x.Shell(ctx, pipeline.ShellRequest{Command: cmd, Dir: wd, Env: []string{"PATH=/usr/bin:/bin"}, Timeout: timeout, Mask: mask})
	}
	t.Run("output past lev's cap is cut and says so", func(t *testing.T) {
		r, err := shell("head -c 1000000 /dev/zero", nil, 20*time.Second)
		if err != nil || len(r.Stdout) != pipeline.MaxResultBytes+len("\n[output truncated]") || !strings.HasSuffix(string(r.Stdout), "[output truncated]") {
			t.Fatalf("%d bytes, %v", len(r.Stdout), err)
		}
		r, err = shell("printf small", nil, 20*time.Second)
		if err != nil || string(r.Stdout) != "small" {
			t.Fatalf("control: %q %v", r.Stdout, err)
		}
	})
	t.Run("timeout kills and reports", func(t *testing.T) {
		start := time.Now()
		r, err := shell("sleep 30", nil, time.Second)
		if err != nil || r.ExitCode == 0 || !strings.Contains(string(r.Stderr), "killed: timeout") || time.Since(start) > 10*time.Second {
			t.Fatalf("%+v %v after %v", r, err, time.Since(start))
		}
	})
	t.Run("lev state inside the shared workdir is refused", func(t *testing.T) {
		marker := filepath.Join(wd, "ran")
		_, err := shell("touch "+marker, []string{filepath.Join(wd, ".lev")}, 10*time.Second)
		if err == nil || !strings.Contains(err.Error(), "lies in the workdir") {
			t.Fatalf("want a refusal: %v", err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("ran anyway")
		}
		// Control: lev's state outside the workdir (as in the jail) is no obstacle.
		if _, err := shell("touch "+marker, []string{"/var/lib/lev"}, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Fatal("control did not run")
		}
	})
}

func TestOptionsFromEnvBench(t *testing.T) {
	t.Setenv(bench.Env, "relative/exec.sock")
	if _, err := OptionsFromEnv(); err == nil || !strings.Contains(err.Error(), bench.Env) {
		t.Fatalf("relative socket: %v", err)
	}
	t.Setenv(bench.Env, "/run/lever-bench/exec.sock")
	if o, err := OptionsFromEnv(); err != nil || o.BenchSocket != "/run/lever-bench/exec.sock" {
		t.Fatalf("%+v %v", o, err)
	}
}

// modelScript is a scripted model's rules from testdata/NAME (the provider's TOML script
// format). Read when a test asks, never at init: some test binaries re-run themselves as
// helpers from another directory.
func modelScript(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return string(b)
}
