package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/provider"
)

func newEngine(t *testing.T, bp string, prov provider.Provider) (*Engine, string) {
	root, _ := filepath.EvalSymlinks(t.TempDir())
	wd := filepath.Join(root, "wd")
	os.MkdirAll(wd, 0o755)
	write(t, filepath.Join(root, "agents", "a.toml"), bp)
	cfg, _ := levconfig.Parse("config.toml", nil)
	return wired(&Engine{Store: &Store{Dir: filepath.Join(root, "runs")}, AgentsDir: filepath.Join(root, "agents"), Home: root,
		Config:      func() *levconfig.Config { return cfg },
		NewProvider: func(levconfig.Provider) (provider.Provider, error) { return prov, nil }}), wd
}

func TestRunOutcomes(t *testing.T) {
	loop := &provider.Scripted{Rules: []provider.Rule{{Calls: []provider.ScriptCall{{Tool: "list_dir", Args: `{}`}}}}}
	plain := &provider.Scripted{Rules: []provider.Rule{{Text: "plain answer"}}}
	broken := &provider.Scripted{}
	notOffered := &provider.Scripted{Rules: []provider.Rule{
		{Turn: 1, Calls: []provider.ScriptCall{{Tool: "shell", Args: `{"command":"id"}`}}},
		{Turn: 2, Calls: []provider.ScriptCall{{Tool: "submit_output", Args: `{"output":"{{last}}"}`}}}}}
	cases := []struct {
		name   string
		bp     string
		prov   provider.Provider
		status Status
		want   string
	}{
		{"turn limit", "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"list_dir\"]\nmax_turns = 3\n", loop, StatusFailed, "stage s: no output after 3 turns"},
		{"plain answer ends the stage", "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"list_dir\"]\n", plain, StatusCompleted, `"plain answer"`},
		{"model error fails the run", "name = \"a\"\nversion = \"1\"\n[stages.s]\n", broken, StatusFailed, "stage s: model: scripted: no rule matches"},
		{"a tool not offered goes back to the model", "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"submit_output\"]\n", notOffered, StatusCompleted, `tool \"shell\" is not offered in stage \"s\"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eng, wd := newEngine(t, tc.bp, tc.prov)
			rec, err := eng.Start(context.Background(), Spec{Agent: "a", Workdir: wd})
			if err != nil {
				t.Fatal(err)
			}
			eng.Wait()
			rec, _ = eng.Store.Load(rec.ID)
			got := rec.Error + string(rec.Result)
			if rec.Status != tc.status || !strings.Contains(got, tc.want) {
				t.Fatalf("%s: %s", rec.Status, got)
			}
		})
	}
}

func TestSpawnRefusals(t *testing.T) {
	eng, wd := newEngine(t, "name = \"a\"\nversion = \"1\"\n[stages.s]\n", &provider.Scripted{})
	cases := []struct {
		spec Spec
		want string
	}{
		{Spec{Agent: "a"}, "workdir is required"},
		{Spec{Agent: "a", Workdir: "wd"}, "must be an absolute path"},
		{Spec{Agent: "a", Workdir: "/"}, "the whole filesystem would be inside the fence"},
		{Spec{Agent: "a", Workdir: filepath.Join(wd, "missing")}, "no such file"},
		{Spec{Agent: "nope", Workdir: wd}, `no blueprint for agent "nope"`},
		{Spec{Agent: "../etc", Workdir: wd}, "blueprint ../etc"},
	}
	for _, tc := range cases {
		if _, err := eng.Start(context.Background(), tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.spec, err, tc.want)
		}
	}
	if recs, _ := eng.Store.List(); len(recs) != 0 {
		t.Fatalf("a refused spawn left %d run records", len(recs))
	}
}
