//go:build e2e

package sandbox_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/sandbox"
	"github.com/lever-jail/lever/internal/lev/sandbox/sandboxexec"
	"github.com/lever-jail/lever/internal/lev/taint/taintgate"
)

// TestLevRunInRootlessPodman: a real lev run (runner engine, scripted provider, pipeline,
// the registered sandbox executor) whose shell calls go to rootless podman as the
// unprivileged test user: both stages (identical settings) share one hardened container
// with no network, the workdir is the same files on both sides, and the container is gone
// when the run ends.
func TestLevRunInRootlessPodman(t *testing.T) {
	f := sandbox.PodmanFixture(t)
	wd := f.Workdir(t)
	os.WriteFile(filepath.Join(wd, "input.txt"), []byte("from the host\n"), 0o644)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "agents"), 0o755)
	os.WriteFile(filepath.Join(dir, "script.toml"), []byte(modelScript("run-script.toml")), 0o644)
	os.WriteFile(filepath.Join(dir, "agents", "builder.toml"), []byte(`name = "builder"
version = "1.0.0"
[sandbox]
kind = "container"
image = "`+f.Image()+`"
network = false
[stages.build]
prompt = "build"
tools = ["shell"]
[stages.test]
prompt = "test"
tools = ["shell"]
[stages.test.sandbox]
network = false
`), 0o644)
	sc, _ := json.Marshal(filepath.Join(dir, "script.toml"))
	cfg, err := levconfig.Parse(filepath.Join(dir, "config.toml"), []byte("[provider]\nkind = \"scripted\"\nscript = "+string(sc)+"\n[tool_permissions]\nshell = \"allow\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(dir, "runs")}, AgentsDir: filepath.Join(dir, "agents"),
		Config: func() *levconfig.Config { return cfg }, Home: dir, Log: t.Logf,
		NewGate: taintgate.Factory,
		NewExecutor: func(env *pipeline.RunEnv) (pipeline.Executor, error) {
			return sandboxexec.New(context.Background(), env, f.RootlessOptions())
		}}
	rec, err := eng.Start(context.Background(), runner.Spec{Agent: "builder", Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}
	eng.Wait()
	rec, _ = eng.Store.Load(rec.ID)
	if rec.Status != runner.StatusCompleted {
		t.Fatalf("run %s: %s", rec.Status, rec.Error)
	}
	s1, _ := os.ReadFile(filepath.Join(wd, "stage1.txt"))
	s2, _ := os.ReadFile(filepath.Join(wd, "stage2.txt"))
	lines := strings.Split(strings.TrimSpace(string(s1)), "\n")
	host, _ := os.Hostname()
	t.Logf("stage 1 saw:\n%s", s1)
	if len(lines) != 6 || lines[0] == host || lines[0] != strings.TrimSpace(string(s2)) {
		t.Fatalf("stage hostnames %q / %q (host %q): want one container for both stages", lines, s2, host)
	}
	if lines[1] != "0" || lines[2] != "CapEff:\t0000000000000000" || lines[3] != "NoNewPrivs:\t1" || lines[4] != "1" || lines[5] != "from the host" {
		t.Errorf("inside the container: %q (want uid 0 in its user namespace, no caps, nnp, only lo, the host's file)", lines)
	}
	// The container's writes are the test user's files on the host (rootless mapping).
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(wd, "stage1.txt"), &st); err != nil || int(st.Uid) != f.UID() {
		t.Errorf("stage1.txt owner uid %d, want the test user %d", st.Uid, f.UID())
	}
	out, err := f.AsUser("podman", "--runtime", "runc", "ps", "-a", "--filter", "label=lev.sandbox", "--format", "{{.Names}}")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("containers left after the run: %q %v", out, err)
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
