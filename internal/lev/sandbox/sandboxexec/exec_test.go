package sandboxexec

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/sandbox"
)

func TestOptionsFromEnv(t *testing.T) {
	t.Setenv("LEV_SANDBOX_ENGINE_ARGS", "--runtime runc")
	t.Setenv("LEV_SANDBOX_RUN_ARGS", "--ulimit nofile=1024:1024")
	t.Setenv("LEV_SANDBOX_PIDS_LIMIT", "64")
	t.Setenv("LEV_SANDBOX_MEMORY", "128m")
	o, err := OptionsFromEnv()
	if err != nil || strings.Join(o.EngineArgs, " ") != "--runtime runc" || len(o.RunArgs) != 2 || o.PidsLimit != 64 || o.Memory != "128m" {
		t.Fatalf("%+v %v", o, err)
	}
	t.Setenv("LEV_SANDBOX_PIDS_LIMIT", "lots")
	if _, err := OptionsFromEnv(); err == nil || !strings.Contains(err.Error(), "LEV_SANDBOX_PIDS_LIMIT") {
		t.Fatalf("bad pids limit: %v", err)
	}
}

func env(t *testing.T, cfgText, bpText string) *pipeline.RunEnv {
	t.Helper()
	dir := t.TempDir()
	cfg, err := levconfig.Parse(filepath.Join(dir, "config.toml"), []byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	bp, err := blueprint.Parse(filepath.Join(dir, "bp.toml"), []byte("name = \"x\"\nversion = \"1\"\n"+bpText), pipeline.Known)
	if err != nil {
		t.Fatal(err)
	}
	return &pipeline.RunEnv{RunID: "r-test", Workdir: dir, RunDir: filepath.Join(dir, "run"), Blueprint: bp, Config: cfg, Log: t.Logf}
}

func TestSpawnCheck(t *testing.T) {
	const stages = "[stages.a]\nprompt = \"p\"\ntools = [\"shell\"]\n[stages.b]\nprompt = \"p\"\ntools = [\"shell\"]\n[stages.b.sandbox]\nkind = \"container\"\nimage = \"img\"\n"
	// Stage b asks for a container; the user's engine is not installed: the spawn fails
	// naming the stage.
	_, err := New(context.Background(), env(t, "[sandbox]\nengine = \"lvtsbx-missing\"\n", stages), sandbox.Options{})
	var ue *sandbox.UnavailableError
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "stage b: ") {
		t.Fatalf("spawn: %v", err)
	}
	// warn: spawns, and stage b's command runs on the host.
	e := env(t, "[sandbox]\nengine = \"lvtsbx-missing\"\non_unavailable = \"warn\"\n", stages)
	x, err := New(context.Background(), e, sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	st := e.Blueprint.Order[1]
	res, err := x.Shell(context.Background(), pipeline.ShellRequest{Command: "echo -n on-host; exit 4", Dir: e.Workdir, Timeout: 10 * time.Second,
		Stage: pipeline.Stage{Index: 1, Name: st.Name, Sandbox: st.Sandbox}})
	if err != nil || string(res.Stdout) != "on-host" || res.ExitCode != 4 {
		t.Fatalf("warn fallback: %+v %v", res, err)
	}
	// A bad user [sandbox] value already fails config.toml's load, naming key and line.
	if _, err := levconfig.Parse("config.toml", []byte("[sandbox]\nmounts = [\"relative\"]\n")); err == nil || !strings.Contains(err.Error(), `config.toml:2: key "sandbox.mounts": mounts[0]`) {
		t.Fatalf("bad user mount: %v", err)
	}
}
