//go:build e2e

package sandboxexec

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/sandbox/sbxtest"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
	"github.com/lever-jail/lever/internal/testutil"
)

const image = "localhost/lvtsbx-busybox:exec-e2e"

// Root podman here needs runc, cgroupfs and explicit ulimits (MACHINE-NOTES); these come
// from the user's side (the daemon's environment), as in a real deployment.
var rootOpts = sandbox.Options{EngineArgs: []string{"--runtime", "runc", "--cgroup-manager", "cgroupfs"},
	RunArgs: []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}, PidsLimit: 128, Memory: "256m"}

func podman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("podman", append([]string{"--runtime", "runc"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func setup(t *testing.T) string {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "runc")
	dir := t.TempDir()
	tarball := filepath.Join(dir, "rootfs.tar")
	if err := sbxtest.WriteBusyboxRootfs(tarball); err != nil {
		t.Fatal(err)
	}
	podman(t, "import", tarball, image)
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", image).Run() })
	return dir
}

func runAgent(t *testing.T, dir, cfgExtra, bp string) (*runner.Record, string, error) {
	t.Helper()
	wd := filepath.Join(dir, "wd")
	os.MkdirAll(wd, 0o755)
	os.WriteFile(filepath.Join(wd, "from-host.txt"), []byte("host file"), 0o644)
	os.MkdirAll(filepath.Join(dir, "agents"), 0o755)
	os.WriteFile(filepath.Join(dir, "agents", "sbx.toml"), []byte(bp), 0o644)
	os.WriteFile(filepath.Join(dir, "script.toml"), []byte(modelScript("exec-script.toml")), 0o644)
	sc, _ := json.Marshal(filepath.Join(dir, "script.toml"))
	cfg, err := levconfig.Parse(filepath.Join(dir, "config.toml"), []byte("[provider]\nkind = \"scripted\"\nscript = "+string(sc)+"\n[tool_permissions]\nshell = \"allow\"\n"+cfgExtra))
	if err != nil {
		t.Fatal(err)
	}
	// lev's state (the runs' parent) beside the workdir, not holding it: a workdir inside
	// lev's state reads as unlabelled lev state, Private, and gates every answer.
	eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(dir, "lev", "runs")}, AgentsDir: filepath.Join(dir, "agents"),
		Config: func() *levconfig.Config { return cfg }, Home: dir, Log: t.Logf,
		NewGate: taintgate.Factory,
		NewExecutor: func(env *pipeline.RunEnv) (pipeline.Executor, error) {
			return New(context.Background(), env, rootOpts)
		}}
	rec, err := eng.Start(context.Background(), runner.Spec{Agent: "sbx", Workdir: wd})
	if err != nil {
		return nil, wd, err
	}
	eng.Wait()
	rec, _ = eng.Store.Load(rec.ID)
	return rec, wd, nil
}

const twoStages = `name = "sbx"
version = "1.0.0"
[sandbox]
kind = "container"
image = "` + image + `"
network = false
[stages.one]
prompt = "a"
tools = ["shell", "submit_output"]
[stages.two]
prompt = "b"
tools = ["shell", "submit_output"]
[stages.two.sandbox]
kind = "none"   # cannot loosen the user's container: same settings as stage one
`

// TestRunSharesOneWarmContainerAndRemovesIt: a real run (runner engine, scripted
// provider, pipeline) whose two stages have identical effective settings runs both
// stages' shell calls in one hardened container, sees the workdir, and leaves no
// container behind.
func TestRunSharesOneWarmContainerAndRemovesIt(t *testing.T) {
	dir := setup(t)
	rec, wd, err := runAgent(t, dir, "[sandbox]\nkind = \"container\"\n", twoStages)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != runner.StatusCompleted {
		t.Fatalf("run %s: %s", rec.Status, rec.Error)
	}
	h1, _ := os.ReadFile(filepath.Join(wd, "host1.txt"))
	h2, _ := os.ReadFile(filepath.Join(wd, "host2.txt"))
	host, _ := os.Hostname()
	if len(h1) == 0 || string(h1) != string(h2) || string(h1) == host {
		t.Fatalf("stage hostnames %q / %q (host %q): want one container for both", h1, h2, host)
	}
	calls, _ := os.ReadFile(filepath.Join(dir, "lev", "runs", rec.ID, "stages", "0", "tool_calls.jsonl"))
	for _, want := range []string{`CapEff:\t0000000000000000`, `NoNewPrivs:\t1`, "host file"} {
		if !strings.Contains(string(calls), want) {
			t.Errorf("stage 0 shell output lacks %s:\n%s", want, calls)
		}
	}
	// Container names carry the run id; root's storage is shared with other packages' tests.
	if left := podman(t, "ps", "-a", "--filter", "name="+rec.ID, "--format", "{{.Names}}"); left != "" {
		t.Fatalf("containers left after the run: %s", left)
	}
}

// TestSpawnFailsWhenEngineMissing: on_unavailable = "error" fails the spawn, naming the
// stage and the missing engine; "warn" runs the commands on the host.
func TestSpawnFailsWhenEngineMissing(t *testing.T) {
	dir := setup(t)
	_, _, err := runAgent(t, dir, "[sandbox]\nengine = \"lvtsbx-no-engine\"\n", twoStages)
	if err == nil || !strings.Contains(err.Error(), `stage one: sandbox kind "container" is unavailable: container engine "lvtsbx-no-engine" not found on PATH`) {
		t.Fatalf("spawn error: %v", err)
	}
	rec, wd, err := runAgent(t, dir, "[sandbox]\nengine = \"lvtsbx-no-engine\"\non_unavailable = \"warn\"\n", twoStages)
	if err != nil || rec.Status != runner.StatusCompleted {
		t.Fatalf("warn: %v %+v", err, rec)
	}
	host, _ := os.Hostname()
	if h1, _ := os.ReadFile(filepath.Join(wd, "host1.txt")); string(h1) != host {
		t.Fatalf("warn fallback ran in %q, want the host %q", h1, host)
	}
	// A blueprint cannot pick the engine: its engine key is ignored, the user's is used.
	bp := strings.Replace(twoStages, "network = false", "network = false\nengine = \"lvtsbx-no-engine\"", 1)
	rec, _, err = runAgent(t, dir, "", bp)
	if err != nil || rec.Status != runner.StatusCompleted {
		t.Fatalf("blueprint engine: %v %+v", err, rec)
	}
}
