package runner

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/provider"
)

// The admission decisions: where a new run's blueprint comes from (and so whether it is
// the user's or the tree's, which can only tighten), what a resume checks it against, and
// which config each leg ran under.

const plainBP = "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"submit_output\"]\n"

// TestBlueprintOrigin: a name is looked up in the agents directory, else in the workdir's
// .lev/agents; a path is taken as given; a file whose path or real path lies in the
// workdir is the tree's whichever way it was named (and a link to it is refused).
func TestBlueprintOrigin(t *testing.T) {
	eng, wd := newEngine(t, plainBP, &provider.Scripted{})
	root := filepath.Dir(wd)
	write(t, filepath.Join(wd, blueprint.TreeDir, "treeonly.toml"), strings.Replace(plainBP, `"a"`, `"treeonly"`, 1))
	write(t, filepath.Join(wd, "in-tree.toml"), plainBP)
	write(t, filepath.Join(root, "elsewhere.toml"), plainBP)
	must(t, os.Symlink(filepath.Join(wd, "in-tree.toml"), filepath.Join(root, "link.toml")))
	cases := []struct {
		agent  string
		origin string
		err    string
	}{
		{"a", blueprint.OriginAgents, ""},
		{"treeonly", blueprint.OriginTree, ""},
		{filepath.Join(root, "elsewhere.toml"), blueprint.OriginPath, ""},
		{filepath.Join(wd, "in-tree.toml"), blueprint.OriginTree, ""},
		// Its real path is in the tree, so it is the tree's, and the tree's blueprints are
		// read only as regular files in the tree: refused.
		{filepath.Join(root, "link.toml"), "", "is a symlink: a blueprint in the tree must be a regular file in the tree"},
		{"nobody", "", "nor in the tree"},
		{filepath.Join(root, "missing.toml"), "", "missing.toml"},
	}
	for _, tc := range cases {
		_, origin, data, err := eng.findBlueprint(&Record{Agent: tc.agent, Workdir: wd})
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: err %v, want %q", tc.agent, err, tc.err)
		case tc.err == "" && (err != nil || origin != tc.origin || len(data) == 0):
			t.Errorf("%s: origin %q (%v), want %q", tc.agent, origin, err, tc.origin)
		}
	}
}

// TestResumeChecksTheSnapshot: a resume runs the blueprint snapshot the run was admitted
// under, never the file as it is now, and refuses a snapshot that does not match its hash.
func TestResumeChecksTheSnapshot(t *testing.T) {
	bp := "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"list_dir\"]\nmax_turns = 1\n"
	prov := &turns{resps: []provider.Response{reply(tcall("1", "list_dir", `{}`)), {Text: "done"}, {Text: "done"}}}
	eng, rec := runWith(t, bp, prov, nil, "")
	if rec.Status != StatusFailed || rec.Admission == nil || rec.Admission.Origin != blueprint.OriginAgents {
		t.Fatalf("%s %+v", rec.Status, rec.Admission)
	}
	// The file now allows more turns; the snapshot still says one. Resumed, the stage has
	// used its one turn and fails again without a model call.
	write(t, filepath.Join(eng.AgentsDir, "a.toml"), strings.Replace(bp, "max_turns = 1", "max_turns = 5", 1))
	if _, err := eng.Resume(context.Background(), rec.ID, false); err != nil {
		t.Fatal(err)
	}
	eng.Wait()
	rec, _ = eng.Store.Load(rec.ID)
	if rec.Status != StatusFailed || !strings.Contains(rec.Error, "no output after 1 turns") || len(prov.reqs) != 1 {
		t.Fatalf("resumed under the edited file: %s %q after %d model calls", rec.Status, rec.Error, len(prov.reqs))
	}
	// A snapshot changed in the record (its hash kept) is refused.
	rec.Admission.Blueprint = []byte(strings.Replace(bp, "max_turns = 1", "max_turns = 5", 1))
	must(t, eng.Store.Save(rec))
	if _, err := eng.Resume(context.Background(), rec.ID, false); err == nil || !strings.Contains(err.Error(), "does not match the hash it was admitted under") {
		t.Fatalf("a tampered snapshot resumed: %v", err)
	}
}

// TestConfigHashPerLeg: the config's hash at spawn, and each resume's after it, are in the
// record, so it shows which config each leg ran under.
func TestConfigHashPerLeg(t *testing.T) {
	bp := "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"list_dir\"]\nmax_turns = 1\n"
	prov := &turns{resps: []provider.Response{reply(tcall("1", "list_dir", `{}`))}}
	eng, wd := newEngine(t, bp, prov)
	cfgFile := filepath.Join(filepath.Dir(wd), "config.toml")
	load := func(text string) {
		write(t, cfgFile, text)
		cfg, err := levconfig.Parse(cfgFile, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		eng.Config = func() *levconfig.Config { return cfg }
	}
	load("# first\n")
	rec, err := eng.Start(context.Background(), Spec{Agent: "a", Workdir: wd})
	if err != nil {
		t.Fatal(err)
	}
	eng.Wait()
	load("# second\n")
	if _, err := eng.Resume(context.Background(), rec.ID, false); err != nil {
		t.Fatal(err)
	}
	eng.Wait()
	rec, _ = eng.Store.Load(rec.ID)
	a := rec.Admission
	if a.ConfigSHA256 != sha([]byte("# first\n")) || !slices.Equal(a.ResumeConfigs, []string{sha([]byte("# second\n"))}) {
		t.Fatalf("spawn %s, resumes %v", a.ConfigSHA256, a.ResumeConfigs)
	}
}

// TestScrubSecrets: a variable whose value holds a secret anywhere is dropped, under any
// name; an empty secret drops nothing.
func TestScrubSecrets(t *testing.T) {
	env := []string{"PATH=/bin", "LEV_TOKEN=tok123", "OTHER=x-tok123-y", "HOME=/h", "EMPTY="}
	cases := []struct {
		secrets []string
		want    []string
	}{
		{[]string{"tok123"}, []string{"PATH=/bin", "HOME=/h", "EMPTY="}},
		{[]string{""}, env},
		{nil, env},
		{[]string{"/h", "/bin"}, []string{"LEV_TOKEN=tok123", "OTHER=x-tok123-y", "EMPTY="}},
	}
	for _, tc := range cases {
		if got := scrubSecrets(env, tc.secrets); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.secrets, got, tc.want)
		}
	}
	if env[1] != "LEV_TOKEN=tok123" {
		t.Error("scrubSecrets changed its input")
	}
}
