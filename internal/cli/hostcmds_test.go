package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// recorder stands in for the jail's podman in argv tests: it records every exec and
// answers `lev ps --json` per container from runs.
type recorder struct {
	calls []call
	runs  map[string]string // container -> lev ps --json output
	code  int               // exit code of every other command
	bench map[string]bool   // running workbench containers
	logs  map[string]string // container -> lev logs output (the dashboard's tests)
}

type call struct {
	container string
	argv      []string
	tty       bool
	stdin     bool
}

func (r *recorder) Exec(_ context.Context, name string, o containers.ExecOptions) (int, error) {
	r.calls = append(r.calls, call{name, o.Argv, o.TTY, o.Stdin != nil})
	if len(o.Argv) >= 2 && o.Argv[1] == "ps" {
		out, ok := r.runs[name]
		if !ok {
			fmt.Fprintln(o.Stderr, "no such container")
			return 125, nil
		}
		fmt.Fprint(o.Stdout, out)
		return 0, nil
	}
	if len(o.Argv) >= 2 && o.Argv[1] == "logs" && r.logs != nil {
		fmt.Fprint(o.Stdout, r.logs[name])
	}
	return r.code, nil
}

func (r *recorder) Inspect(name string) (*containers.State, error) {
	if r.bench[name] {
		return &containers.State{Name: name, Running: true, Status: "running"}, nil
	}
	return nil, nil
}

// unitJail writes a loadable lever.yaml (netns, one worker "docs") and routes the host
// commands' attach to rec.
func unitJail(t *testing.T, rec *recorder) string {
	t.Helper()
	t.Setenv("LEVER_DEV_NETNS", "1")
	t.Setenv("LEVER_STATE_DIR", t.TempDir())
	proj := t.TempDir()
	os.MkdirAll(filepath.Join(proj, "docs"), 0o755)
	p := filepath.Join(proj, "lever.yaml")
	os.WriteFile(p, []byte("name: unit\nbackend: netns\nworkers:\n  - name: docs\n    dir: docs\nbroker:\n  llm_auth: subscription\n"), 0o644)
	attachHook = func(*config.Config) (execer, error) { return rec, nil }
	t.Cleanup(func() { attachHook = nil })
	return p
}

// withConfig puts -c CONFIG right after the command name, before any "--".
func withConfig(args []string, cfg string) []string {
	return append([]string{args[0], "-c", cfg}, args[1:]...)
}

func lever(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

const (
	mgrC   = "lever-unit-manager"
	docsC  = "lever-unit-worker-docs"
	runsM  = `[{"id":"r-20261130-100000-aaaaaa","agent":"starter","status":"completed","stage":0,"stage_name":"work","stages":2,"created":"2026-11-30T10:00:00Z"}]`
	runsW  = `[{"id":"r-20261130-090000-bbbbbb","agent":"docsbot","status":"running","stage":0,"stages":[{"name":"w"}],"created":"2026-11-30T09:00:00Z"},{"id":"r-20261130-100000-aaaaaa","agent":"x","status":"failed","created":"2026-11-30T10:00:01Z"}]`
	runsW1 = `[{"id":"r-20261130-090000-bbbbbb","agent":"docsbot","status":"running","stage":0,"stages":[{"name":"w"}],"created":"2026-11-30T09:00:00Z"}]`
)

// confined is how lever shell starts a session in the workbench (lev bench shell).
var confined = []string{"/lev", "bench", "shell", "--hide", "/run/lever-bench", "--"}

// TestHostCommandArgv: each host command runs exactly this lev (or workbench) command in
// exactly this container; the attack rows are flag-looking names and ids, which must
// stay operands.
func TestHostCommandArgv(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		runsW     string
		container string
		argv      []string
	}{
		{"run default agent in manager", []string{"run"}, runsW1, mgrC, []string{"/lev", "run"}},
		{"run with every flag", []string{"run", "fixer", "--input", "fix it", "--yolo", "--allow", "shell", "--allow", "write_file", "--detach", "--json"}, runsW1, mgrC,
			[]string{"/lev", "run", "--input=fix it", "--yolo", "--allow=shell", "--allow=write_file", "--detach", "--json", "--", "fixer"}},
		{"run in a worker", []string{"run", "docsbot", "--worker", "docs"}, runsW1, docsC, []string{"/lev", "run", "--", "docsbot"}},
		{"run: an agent named like a flag stays the agent", []string{"run", "--", "--workdir=/"}, runsW1, mgrC, []string{"/lev", "run", "--", "--workdir=/"}},
		{"run: input that looks like a flag stays the input", []string{"run", "--input", "--yolo"}, runsW1, mgrC, []string{"/lev", "run", "--input=--yolo"}},
		{"run: an --allow value like a flag stays the value", []string{"run", "--allow", "--yolo"}, runsW1, mgrC, []string{"/lev", "run", "--allow=--yolo"}},
		{"logs finds the manager's run", []string{"logs", "r-20261130-100000-aaaaaa"}, runsW1, mgrC, []string{"/lev", "logs", "--", "r-20261130-100000-aaaaaa"}},
		{"logs finds a worker's run", []string{"logs", "-f", "--json", "r-20261130-090000-bbbbbb"}, runsW1, docsC, []string{"/lev", "logs", "--follow", "--json", "--", "r-20261130-090000-bbbbbb"}},
		{"logs AGENT/ID picks the agent", []string{"logs", "docs/r-20261130-100000-aaaaaa"}, runsW, docsC, []string{"/lev", "logs", "--", "r-20261130-100000-aaaaaa"}},
		{"result", []string{"result", "--json", "r-20261130-090000-bbbbbb"}, runsW1, docsC, []string{"/lev", "result", "--json", "--", "r-20261130-090000-bbbbbb"}},
		{"resume", []string{"resume", "manager/r-20261130-100000-aaaaaa"}, runsW, mgrC, []string{"/lev", "resume", "--", "r-20261130-100000-aaaaaa"}},
		// the session runs confined as lev's commands are (lev bench shell covers the exec
		// channel's directory), its command after the --
		{"shell defaults to /bin/sh in the manager's workbench", []string{"shell"}, runsW1, mgrC + "-bench", append(confined, "/bin/sh")},
		{"shell runs a command in a worker's workbench", []string{"shell", "docs", "--", "ls", "-la", "/lever"}, runsW1, docsC + "-bench", append(confined, "ls", "-la", "/lever")},
		{"shell: command flags are the command's", []string{"shell", "--", "sh", "-c", "--config x"}, runsW1, mgrC + "-bench", append(confined, "sh", "-c", "--config x")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{runs: map[string]string{mgrC: runsM, docsC: tc.runsW}, bench: map[string]bool{mgrC + "-bench": true, docsC + "-bench": true}}
			cfg := unitJail(t, rec)
			code, _, errs := lever(withConfig(tc.args, cfg)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			last := rec.calls[len(rec.calls)-1]
			if last.container != tc.container || !reflect.DeepEqual(last.argv, tc.argv) {
				t.Errorf("ran %q in %s, want %q in %s", last.argv, last.container, tc.argv, tc.container)
			}
			if last.tty {
				t.Errorf("TTY session although stdin is not a terminal")
			}
		})
	}
}

// TestHostCommandExitCodes: lev's (or the shell command's) exit code is lever's.
func TestHostCommandExitCodes(t *testing.T) {
	for _, code := range []int{0, 1, 2, 3} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			rec := &recorder{code: code, runs: map[string]string{mgrC: runsM, docsC: runsW1}}
			cfg := unitJail(t, rec)
			if got, _, errs := lever("run", "-c", cfg); got != code {
				t.Errorf("lever run exit %d, want %d (%s)", got, code, errs)
			}
		})
	}
}

// TestHostCommandBadInput: each bad input is one line naming it and what to do, exit 2,
// and nothing reaches the jail; the positive control beside each shows the same command
// with the good value does.
func TestHostCommandBadInput(t *testing.T) {
	inFile := filepath.Join(t.TempDir(), "task.txt")
	os.WriteFile(inFile, []byte("task from a file"), 0o644)
	nulFile := filepath.Join(t.TempDir(), "nul.txt")
	os.WriteFile(nulFile, []byte("a\x00b"), 0o644)
	cases := []struct {
		name  string
		args  []string
		want  []string // in the error line; nil: a positive control that must reach the jail
		argvs string   // control: the last argv, joined
	}{
		{name: "--input with --input-file", args: []string{"run", "--input", "x", "--input-file", inFile}, want: []string{"--input and --input-file", "one way"}},
		{name: "control: --input-file alone", args: []string{"run", "--input-file", inFile}, argvs: "/lev run --input=task from a file"},
		{name: "--input-file missing", args: []string{"run", "--input-file", "/nonexistent/task"}, want: []string{"--input-file /nonexistent/task"}},
		{name: "--input-file with a NUL", args: []string{"run", "--input-file", nulFile}, want: []string{nulFile, "NUL"}},
		{name: "--input too long", args: []string{"run", "--input", strings.Repeat("x", maxInput+1)}, want: []string{"--input", "more than"}},
		{name: "worker not in lever.yaml", args: []string{"run", "--worker", "nope"}, want: []string{`worker "nope" is not in`, "the agents are manager, docs"}},
		{name: "control: worker in lever.yaml", args: []string{"run", "--worker", "docs"}, argvs: "/lev run"},
		{name: "shell: worker not in lever.yaml", args: []string{"shell", "nope", "--", "ls"}, want: []string{`worker "nope"`, "manager, docs"}},
		{name: "shell: two agents", args: []string{"shell", "manager", "docs"}, want: []string{"one agent"}},
		{name: "run id that does not exist", args: []string{"logs", "r-20261130-000000-ffffff"}, want: []string{"run r-20261130-000000-ffffff does not exist", "lever ps lists the runs"}},
		{name: "run id of another agent", args: []string{"result", "docs/r-20261130-100000-aaaaaa"}, want: []string{"does not exist in docs of jail unit"}},
		{name: "control: run id that exists", args: []string{"result", "r-20261130-100000-aaaaaa"}, argvs: "/lev result -- r-20261130-100000-aaaaaa"},
		{name: "run id naming an unknown worker", args: []string{"logs", "nope/r-1"}, want: []string{`worker "nope"`}},
		{name: "run id that is a path", args: []string{"logs", "../../etc/passwd"}, want: []string{"not a lev run id"}},
		{name: "run id that is a flag", args: []string{"resume", "--", "--yolo"}, want: []string{`"--yolo" is not a lev run id`}},
		{name: "config missing", args: []string{"ps", "/nonexistent/lever.yaml"}, want: []string{"/nonexistent/lever.yaml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{runs: map[string]string{mgrC: runsM, docsC: runsW1}}
			cfg := unitJail(t, rec)
			args := append([]string{}, tc.args...)
			if args[0] != "ps" {
				args = withConfig(args, cfg)
			}
			code, _, errs := lever(args...)
			if tc.want == nil {
				if code != 0 || len(rec.calls) == 0 {
					t.Fatalf("control: exit %d, %d execs: %s", code, len(rec.calls), errs)
				}
				if got := strings.Join(rec.calls[len(rec.calls)-1].argv, " "); got != tc.argvs {
					t.Errorf("control ran %q, want %q", got, tc.argvs)
				}
				return
			}
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if strings.Count(strings.TrimSpace(errs), "\n") != 0 {
				t.Errorf("error is not one line: %q", errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("error %q lacks %q", errs, w)
				}
			}
			for _, c := range rec.calls {
				if len(c.argv) < 2 || c.argv[1] != "ps" {
					t.Errorf("a refused command still ran %q in %s", c.argv, c.container)
				}
			}
		})
	}
}

// TestWorkerNamedManager: a worker lever.yaml names "manager" is never resolved to the
// manager (which sees the whole tree); the control is the same jail's other worker.
func TestWorkerNamedManager(t *testing.T) {
	rec := &recorder{bench: map[string]bool{}}
	cfgPath := unitJail(t, rec)
	os.WriteFile(cfgPath, []byte("name: unit\nbackend: netns\nworkers:\n  - name: manager\n    dir: docs\n  - name: other\n    dir: other\nbroker:\n  llm_auth: subscription\n"), 0o644)
	for _, args := range [][]string{{"run", "--worker", "manager"}, {"shell", "manager"}, {"logs", "manager/r-1"}} {
		code, _, errs := lever(withConfig(args, cfgPath)...)
		if code != 2 || !strings.Contains(errs, `worker named "manager"`) {
			t.Errorf("lever %v: exit %d %s", args, code, errs)
		}
	}
	if len(rec.calls) != 0 {
		t.Errorf("exec'd %v", rec.calls)
	}
	if code, _, errs := lever("run", "-c", cfgPath, "--worker", "other"); code != 0 || rec.calls[0].container != "lever-unit-worker-other" {
		t.Errorf("control: exit %d %v %s", code, rec.calls, errs)
	}
}

// TestHostCommandShellNotUp: a workbench container that is not running is "jail not up",
// exit 2, and nothing is exec'd.
func TestHostCommandShellNotUp(t *testing.T) {
	rec := &recorder{bench: map[string]bool{}}
	cfg := unitJail(t, rec)
	code, _, errs := lever("shell", "-c", cfg, "--", "ls")
	if code != 2 || !strings.Contains(errs, "jail unit is not up") || !strings.Contains(errs, mgrC+"-bench missing") || !strings.Contains(errs, "run lever up") {
		t.Errorf("exit %d: %s", code, errs)
	}
	if len(rec.calls) != 0 {
		t.Errorf("exec'd %v", rec.calls)
	}
	rec.bench[mgrC+"-bench"] = true // control
	if code, _, errs := lever("shell", "-c", cfg, "--", "ls"); code != 0 || len(rec.calls) != 1 {
		t.Errorf("control: exit %d, %d calls: %s", code, len(rec.calls), errs)
	}
}

// TestPsMerges: lever ps lists every agent's runs, oldest first, with the agent column,
// and --json nests lev's record unchanged under its agent.
func TestPsMerges(t *testing.T) {
	rec := &recorder{runs: map[string]string{mgrC: runsM, docsC: runsW1}}
	cfg := unitJail(t, rec)
	code, out, errs := lever("ps", "-c", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "AGENT") || !strings.HasPrefix(lines[1], "docs ") || !strings.HasPrefix(lines[2], "manager ") ||
		!strings.Contains(lines[1], "1/1 w") || !strings.Contains(lines[2], "1/2 work") {
		t.Errorf("ps:\n%s", out)
	}
	code, out, _ = lever("ps", "--json", "-c", cfg)
	if code != 0 || !strings.Contains(out, `"agent": "docs"`) || !strings.Contains(out, `"container": "lever-unit-worker-docs"`) || !strings.Contains(out, `"agent": "docsbot"`) {
		t.Errorf("ps --json:\n%s", out)
	}
	// A worker whose lev cannot be asked: the manager's runs still show, exit 1.
	delete(rec.runs, docsC)
	code, out, errs = lever("ps", "-c", cfg)
	if code != 1 || !strings.Contains(out, "manager ") || !strings.Contains(errs, "listing docs's runs") {
		t.Errorf("ps with a failing worker: exit %d\n%s\n%s", code, out, errs)
	}
}

func probeDesc(name string, boundary, usable bool) backend.Descriptor {
	return backend.Descriptor{
		Profile: backend.Profile{Name: name, HypervisorBoundary: boundary},
		Probe: func(context.Context) backend.Availability {
			if usable {
				return backend.Availability{Usable: true, Tool: "/usr/bin/" + name, Version: "1.0"}
			}
			return backend.Availability{Reason: name + " is not installed"}
		},
	}
}

// TestInit: lever init writes a lever.yaml that loads and a blueprint lev accepts,
// choosing by lever backends' probes, and refuses to overwrite (writing nothing).
func TestInit(t *testing.T) {
	t.Setenv("LEVER_DEV_NETNS", "1")
	cases := []struct {
		name     string
		descs    []backend.Descriptor
		existing string // a file already in DIR
		want     string // backend chosen, or the error's text
		code     int
	}{
		{"prefers a hypervisor boundary", []backend.Descriptor{probeDesc("netns", false, true), probeDesc("lima", true, true)}, "", "lima", 0},
		{"takes the only usable one", []backend.Descriptor{probeDesc("lima", true, false), probeDesc("netns", false, true)}, "", "netns", 0},
		{"none usable", []backend.Descriptor{probeDesc("lima", true, false)}, "", "no backend is usable on this host (lima: lima is not installed)", 2},
		{"existing lever.yaml", []backend.Descriptor{probeDesc("lima", true, true)}, "lever.yaml", "lever.yaml already exists", 2},
		{"existing blueprint", []backend.Descriptor{probeDesc("lima", true, true)}, ".lev/agents/starter.toml", "starter.toml already exists", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			initDescriptors = func() []backend.Descriptor { return tc.descs }
			t.Cleanup(func() { initDescriptors = backend.All })
			dir := filepath.Join(t.TempDir(), "My Project_1")
			os.Mkdir(dir, 0o755)
			if tc.existing != "" {
				os.MkdirAll(filepath.Dir(filepath.Join(dir, tc.existing)), 0o755)
				os.WriteFile(filepath.Join(dir, tc.existing), []byte("mine\n"), 0o644)
			}
			before := listTree(t, dir)
			code, out, errs := lever("init", dir)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s%s", code, tc.code, out, errs)
			}
			if tc.code != 0 {
				if !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
					t.Errorf("error %q, want one line with %q", errs, tc.want)
				}
				if after := listTree(t, dir); !reflect.DeepEqual(before, after) {
					t.Errorf("a refused init changed DIR: %v -> %v", before, after)
				}
				if tc.existing != "" {
					if b, _ := os.ReadFile(filepath.Join(dir, tc.existing)); string(b) != "mine\n" {
						t.Errorf("%s overwritten", tc.existing)
					}
				}
				return
			}
			cfg, err := config.LoadIdentity(filepath.Join(dir, "lever.yaml"))
			if err != nil {
				t.Fatalf("written lever.yaml does not load: %v", err)
			}
			if cfg.Backend != tc.want || cfg.Name != "my-project-1" || cfg.Egress != "closed" || cfg.Lev.Blueprint != initBlueprintFile {
				t.Errorf("lever.yaml: backend %s name %s egress %s blueprint %s", cfg.Backend, cfg.Name, cfg.Egress, cfg.Lev.Blueprint)
			}
			known := func(n string) bool { return toolnames.Check(n) == nil }
			if _, err := blueprint.Load(filepath.Join(dir, initBlueprintFile), known); err != nil {
				t.Errorf("starter blueprint refused by lev's loader: %v", err)
			}
			// A second init over its own output refuses, naming lever.yaml.
			if code, _, errs := lever("init", dir); code != 2 || !strings.Contains(errs, filepath.Join(dir, "lever.yaml")+" already exists") {
				t.Errorf("second init: exit %d %s", code, errs)
			}
		})
	}
	t.Run("not a directory", func(t *testing.T) {
		code, _, errs := lever("init", "/nonexistent/dir")
		if code != 2 || !strings.Contains(errs, "/nonexistent/dir is not a directory") {
			t.Errorf("exit %d %s", code, errs)
		}
	})
}

func listTree(t *testing.T, dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		out = append(out, p)
		return nil
	})
	return out
}
