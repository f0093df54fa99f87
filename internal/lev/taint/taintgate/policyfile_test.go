package taintgate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/policy"
	"github.com/lever-jail/lever/internal/lev/runner"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// TestPolicyFileResolvedOnceForTestAndLiveRuns: $LEV_POLICY, config.toml's [security]
// policy_file and the default <lev home>/policy.toml are resolved by one function for
// `lev policy test` and for a live run's gate. Each candidate file holds a different
// verdict for the same call (http_post of Private data to 127.0.0.1): the file that
// resolves allows it, the others deny it. For every combination, `lev policy test` and
// the live run's taint_audit.json must agree, and both must name the expected file's
// verdict. (Before the fix, the env rows diverged: policy test allowed, the run denied.)
func TestPolicyFileResolvedOnceForTestAndLiveRuns(t *testing.T) {
	allowed, hits := countingServer(t, "127.0.0.1")
	const allowPol = "[[allow]]\ntool = \"http_post\"\ntarget = \"127.0.0.1\"\nmax_sensitivity = \"private\"\n"
	const denyPol = "default = \"deny\"\n"
	cases := []struct {
		name        string
		env, config bool
		want        string // which file must decide: env | config | home
	}{
		{"neither", false, false, "home"},
		{"config only", false, true, "config"},
		{"env only", true, false, "env"},
		{"env and config: env wins", true, true, "env"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t)
			files := map[string]string{
				"env":    filepath.Join(w.root, "env-policy.toml"),
				"config": filepath.Join(w.root, "cfg-policy.toml"),
				"home":   filepath.Join(w.levHome, "policy.toml"),
			}
			for k, f := range files {
				text := denyPol
				if k == c.want {
					text = allowPol
				}
				if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("LEV_HOME", w.levHome)
			t.Setenv("LEV_POLICY", "")
			if c.env {
				t.Setenv("LEV_POLICY", files["env"])
			}
			scriptFile := filepath.Join(w.root, "script.toml")
			os.WriteFile(scriptFile, []byte(strings.ReplaceAll(script("one", "http_post", `{"url": "`+allowed.URL+`/x", "body": "b"}`), "HOME", w.home)), 0o600)
			cfg := "[provider]\nkind = \"scripted\"\nscript = " + q(scriptFile) + "\n"
			if c.config {
				cfg += "[security]\npolicy_file = " + q(files["config"]) + "\n"
			}
			cfg += "[tool_permissions]\nhttp_post = \"allow\"\n[agent_read_paths.exfil]\nallow = [\"~/secret\"]\n"
			cfgFile := filepath.Join(w.levHome, "config.toml")
			os.WriteFile(cfgFile, []byte(cfg), 0o600)
			t.Setenv("LEV_CONFIG", cfgFile)

			// lev policy test, as the CLI runs it (no --policy): the default file, loaded
			// as a live run loads it, then the dry run (internal/lev/cli's runPolicyTest).
			polFile, err := policy.DefaultPath()
			if err != nil {
				t.Fatal(err)
			}
			pol, _, err := policy.LoadAsLive(polFile)
			if err != nil {
				t.Fatalf("lev policy test: %v", err)
			}
			dry, err := pol.DryRun(context.Background(), "http_post", "127.0.0.1", taint.Private)
			if err != nil {
				t.Fatalf("lev policy test: %v", err)
			}
			testAllows := dry.Modes["headless"].Allowed

			// A live run of the same call.
			conf, err := levconfig.Load(cfgFile)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(w.levHome, "agents", "exfil.toml"), []byte("name = \"exfil\"\nversion = \"1\"\n[read_paths]\nallow = [\"~/secret\"]\n[stages.one]\ntools = [\"read_file\", \"http_post\"]\n"), 0o600)
			eng := &runner.Engine{Store: &runner.Store{Dir: filepath.Join(w.levHome, "runs")}, AgentsDir: filepath.Join(w.levHome, "agents"),
				Config: func() *levconfig.Config { return conf }, Home: w.home, Log: t.Logf, NewGate: Factory, NewExecutor: hostExec}
			hits.Store(0)
			rec, err := eng.Start(context.Background(), runner.Spec{Agent: "exfil", Workdir: w.wd})
			if err != nil {
				t.Fatal(err)
			}
			eng.Wait()
			au, _ := taint.ReadAudit(taint.AuditPath(eng.Store.RunDir(rec.ID), 0))
			au = calls(au)
			if len(au) != 1 || au[0].Tool != "http_post" {
				t.Fatalf("live audit %+v", au)
			}
			liveAllows := au[0].Decision == "allow"

			if testAllows != liveAllows {
				t.Fatalf("lev policy test allows=%v, live run allows=%v (%s)", testAllows, liveAllows, au[0].DecisionSource)
			}
			if !liveAllows || hits.Load() != 1 {
				t.Fatalf("the %s file (allow) did not decide: live %s, server hits %d", c.want, au[0].DecisionSource, hits.Load())
			}
			// Positive control: the files that did not resolve really deny, so a run
			// reading the wrong one would have been blocked.
			for k, f := range files {
				if k == c.want {
					continue
				}
				p, err := policy.Load(f)
				if err != nil {
					t.Fatal(err)
				}
				res, err := p.DryRun(context.Background(), "http_post", "127.0.0.1", taint.Private)
				if err != nil || res.Modes["headless"].Allowed {
					t.Fatalf("control: %s file allows: %v", k, err)
				}
			}
		})
	}
}
