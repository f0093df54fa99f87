package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func runMain(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

// jailCalls is one call of every jail command as a user might type it with the config
// positional (CFG), and the call lever must answer with. TestGrammarEveryCommand holds it
// to the command tree: a new jail command must be added here.
var jailCalls = []struct {
	args []string
	want string
}{
	{[]string{"up", "CFG"}, "lever up -c CFG"},
	{[]string{"--accept-config", "up", "CFG"}, "lever up -c CFG --accept-config"},
	{[]string{"apply", "--dry-run", "CFG"}, "lever apply -c CFG --dry-run"},
	{[]string{"status", "CFG", "--json"}, "lever status -c CFG --json"},
	{[]string{"stop", "CFG"}, "lever stop -c CFG"},
	{[]string{"destroy", "CFG", "--verbose"}, "lever destroy -c CFG --verbose"},
	{[]string{"down", "CFG"}, "lever down -c CFG"},
	{[]string{"acceptance", "--out", "r.md", "CFG"}, "lever acceptance -c CFG --out r.md"},
	{[]string{"ps", "CFG"}, "lever ps -c CFG"},
	{[]string{"run", "work", "--input", "x", "CFG"}, "lever run -c CFG work --input x"},
	{[]string{"run", "CFG", "--input", "fix lever.yaml"}, "lever run -c CFG --input 'fix lever.yaml'"},
	{[]string{"logs", "CFG", "r-1", "-f"}, "lever logs -c CFG r-1 -f"},
	{[]string{"result", "r-1", "CFG"}, "lever result -c CFG r-1"},
	{[]string{"resume", "CFG", "manager/r-1"}, "lever resume -c CFG manager/r-1"},
	{[]string{"shell", "CFG", "w1", "--", "cat", "lever.yaml"}, "lever shell -c CFG w1 -- cat lever.yaml"},
	{[]string{"egress", "plan", "CFG", "--alias-v4", "10.1.2.3"}, "lever egress plan -c CFG --alias-v4 10.1.2.3"},
	{[]string{"egress", "apply", "CFG"}, "lever egress apply -c CFG"},
	{[]string{"egress", "verify", "CFG"}, "lever egress verify -c CFG"},
	{[]string{"broker", "serve", "CFG", "--san-ip=127.0.0.1"}, "lever broker serve -c CFG --san-ip=127.0.0.1"},
	{[]string{"broker", "start", "CFG"}, "lever broker start -c CFG"},
	{[]string{"broker", "stop", "CFG"}, "lever broker stop -c CFG"},
	{[]string{"broker", "status", "CFG"}, "lever broker status -c CFG"},
	{[]string{"broker", "revoke", "CFG", "--agent", "w1"}, "lever broker revoke -c CFG --agent w1"},
	{[]string{"broker", "rotate", "CFG"}, "lever broker rotate -c CFG"},
	{[]string{"broker", "ticket", "--agent", "w1", "CFG"}, "lever broker ticket -c CFG --agent w1"},
	{[]string{"doctor", "CFG", "--json"}, "lever doctor -c CFG --json"},
	{[]string{"dashboard", "CFG", "--no-open"}, "lever dashboard -c CFG --no-open"},
}

// TestGrammarEveryCommand: every command that works on a jail takes -c and no positional
// config. Given one (the attack on the grammar: the call the issue quotes, `lever run
// work --input x proj/lever.yaml`), each refuses it, exit 2, with the exact call it meant,
// and nothing is made; the call it suggests (the positive control) gets past the grammar
// to the loader, which names the file -c gave.
func TestGrammarEveryCommand(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	t.Setenv("LEVER_STATE_DIR", state)
	t.Setenv("LEVER_DEV_NETNS", "1")
	cfg := filepath.Join(t.TempDir(), "proj", "lever.yaml") // missing: the loader must say so
	covered := map[string]bool{}
	for _, tc := range jailCalls {
		args := make([]string, len(tc.args))
		for i, a := range tc.args {
			args[i] = strings.ReplaceAll(a, "CFG", cfg)
		}
		want := strings.ReplaceAll(tc.want, "CFG", cfg)
		name := strings.Join(tc.args, " ")
		t.Run(name, func(t *testing.T) {
			code, out, errs := runMain(args...)
			path, _, _ := strings.Cut(want, " -c ")
			covered[path] = true
			if wantErr := "lever: " + path + " takes the config as -c: " + want + "\n"; code != 2 || out != "" || errs != wantErr {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errs, wantErr)
			}
			// The suggested call, as typed (its one quoted argument unquoted).
			again := suggestedArgs(t, want)
			code, _, errs = runMain(again...)
			if code != 2 || !strings.Contains(errs, cfg) || strings.Contains(errs, "takes the config as -c") {
				t.Fatalf("the suggested call %q: exit %d, stderr %q; want 2 naming %s", want, code, errs, cfg)
			}
		})
	}
	if _, err := os.Stat(state); err == nil {
		t.Errorf("a refused call made lever's state directory %s", state)
	}
	var jail, missingFlag []string
	for _, c := range allCommands(NewRoot(&bytes.Buffer{}, &bytes.Buffer{})) {
		p := c.CommandPath()
		if !c.Runnable() || p == "lever" {
			continue
		}
		switch has := c.Flags().Lookup("config") != nil; {
		case nonJailCommands[p] && has:
			t.Errorf("%s is listed as taking no config but has -c", p)
		case !nonJailCommands[p] && !has:
			missingFlag = append(missingFlag, p)
		case !nonJailCommands[p]:
			jail = append(jail, p)
		}
	}
	if len(missingFlag) > 0 {
		t.Errorf("commands without -c that are not in nonJailCommands: %v", missingFlag)
	}
	var notCovered []string
	for _, p := range jail {
		if !covered[p] {
			notCovered = append(notCovered, p)
		}
	}
	sort.Strings(notCovered)
	if len(notCovered) > 0 {
		t.Errorf("jail commands with no row in jailCalls: %v", notCovered)
	}
	if len(jail) < 20 {
		t.Errorf("only %d jail commands found: %v", len(jail), jail)
	}
}

// suggestedArgs splits a suggested call back into Main's arguments: words, and one
// single-quoted argument.
func suggestedArgs(t *testing.T, call string) []string {
	t.Helper()
	var out []string
	for rest := strings.TrimPrefix(call, "lever "); rest != ""; {
		rest = strings.TrimLeft(rest, " ")
		if strings.HasPrefix(rest, "'") {
			end := strings.Index(rest[1:], "'")
			out = append(out, rest[1:end+1])
			rest = rest[end+2:]
			continue
		}
		w, r, _ := strings.Cut(rest, " ")
		out = append(out, w)
		rest = r
	}
	return out
}

// TestPositionalConfigHints: a directory names its lever.yaml, a path that needs quoting is
// quoted, and what is no config passes untouched: an agent, a run id, shell's command
// after -- (which may well name lever.yaml), a flag's value.
func TestPositionalConfigHints(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my proj")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	for _, tc := range []struct {
		name string
		args []string
		want string // the whole stderr line after "lever: ", or a part of it with notHint
		hint bool
	}{
		{"a directory", []string{"up", dir}, "lever up takes the config as -c: lever up -c '" + filepath.Join(dir, "lever.yaml") + "'", true},
		{"an argument to a command that takes none", []string{"status", "proj"}, "lever status takes the config as -c: lever status -c proj", true},
		{"a .yml file", []string{"logs", "r-1", "p.yml"}, "lever logs takes the config as -c: lever logs -c p.yml r-1", true},
		{"a quote in the path", []string{"ps", "it's.yaml"}, `lever ps takes the config as -c: lever ps -c 'it'\''s.yaml'`, true},
		{"shell's command names lever.yaml", []string{"shell", "-c", missing, "--", "cat", "lever.yaml"}, missing, false},
		{"a flag's value ends in .yaml", []string{"run", "-c", missing, "--input", "fix lever.yaml"}, missing, false},
		{"a run id", []string{"result", "-c", missing, "r-20260101-120000-a1b2c3"}, missing, false},
		{"--config=", []string{"destroy", "--config=" + missing}, missing, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runMain(tc.args...)
			if code != 2 {
				t.Fatalf("exit %d, stderr %q", code, errs)
			}
			if tc.hint && errs != "lever: "+tc.want+"\n" {
				t.Fatalf("stderr %q, want %q", errs, "lever: "+tc.want+"\n")
			}
			if !tc.hint && (!strings.Contains(errs, tc.want) || strings.Contains(errs, "takes the config as -c")) {
				t.Fatalf("stderr %q: want the loader's error naming %s, no hint", errs, tc.want)
			}
		})
	}
}

// TestConfigFlagForms: -c FILE and --config=FILE are the same call: the same plan.
func TestConfigFlagForms(t *testing.T) {
	cfg := egressConfig(t, "closed")
	plan := []string{"egress", "plan", "--alias-v4", "10.1.2.3", "--alias-v6", "fd00::3"}
	code, short, errs := runMain(append(append([]string{}, plan...), "-c", cfg)...)
	if code != 0 || !strings.Contains(short, "LEVER_EGRESS") {
		t.Fatalf("-c: exit %d, %q %s", code, short, errs)
	}
	if code, long, errs := runMain(append(append([]string{}, plan...), "--config="+cfg)...); code != 0 || long != short {
		t.Fatalf("--config=: exit %d, stderr %s, output differs:\n%s", code, errs, long)
	}
}

// TestConfigFoundUpward: without -c, lever.yaml is the one in the working directory or
// the nearest directory above it, as git finds .git; the nearest wins. The attack: a
// lever.yaml that another user put in a directory above yours (/tmp, /home), or that
// anyone may write, would choose the jail's mounts and egress: it is refused, naming the
// file, and nothing is made; the same file made yours, mode 0644 (the control), is taken.
func TestConfigFoundUpward(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	outer := egressConfig(t, "closed") // DIR/lever.yaml, tree DIR/tree
	dir := filepath.Dir(outer)
	state := os.Getenv("LEVER_STATE_DIR")
	inner := filepath.Join(dir, "a", "lever.yaml") // nearer, posture open
	deep := filepath.Join(dir, "a", "b", "c")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "a", "tree"), 0o755)
	os.WriteFile(inner, []byte("name: plan\nbackend: netns\ntree: tree\negress: open\nbroker:\n  llm_auth: api-key\n  api_key_file: "+filepath.Join(dir, "key")+"\n"), 0o644)
	plan := []string{"egress", "plan", "--alias-v4", "10.1.2.3", "--alias-v6", "fd00::3"}
	planOf := func(cfg string) string {
		code, out, errs := runMain(append(append([]string{}, plan...), "-c", cfg)...)
		if code != 0 {
			t.Fatalf("plan -c %s: exit %d: %s", cfg, code, errs)
		}
		return out
	}
	want := map[string]string{outer: planOf(outer), inner: planOf(inner)}
	if want[outer] == want[inner] {
		t.Fatal("control: the two configs plan alike, so the test could not tell them apart")
	}
	for _, tc := range []struct {
		name  string
		cwd   string
		setup func(t *testing.T)
		want  string // the config whose plan prints, or "" for a refusal
		err   string
	}{
		{"in the working directory", filepath.Join(dir, "a"), nil, inner, ""},
		{"the nearest above", deep, nil, inner, ""},
		{"further up", filepath.Join(dir, "tree"), nil, outer, ""},
		{"owned by another user", deep, func(t *testing.T) { chown(t, inner, 65534) },
			"", "lever: found " + inner + " is owned by uid 65534, not you (uid 0): lever does not take a lever.yaml from above your directory that someone else put there; give the one you mean with -c FILE\n"},
		{"world-writable", deep, func(t *testing.T) { chmod(t, inner, 0o666) },
			"", "lever: found " + inner + " is world-writable (mode 0666): anyone could have written it; make it yours alone (chmod o-w) or give the one you mean with -c FILE\n"},
		{"a link of yours to another user's file", deep, func(t *testing.T) {
			other := filepath.Join(dir, "other.yaml")
			data, _ := os.ReadFile(inner)
			os.WriteFile(other, data, 0o644)
			chown(t, other, 65534)
			os.Remove(inner)
			if err := os.Symlink(other, inner); err != nil {
				t.Fatal(err)
			}
		}, "", "lever: found " + inner + ", a symlink to a file that is owned by uid 65534, not you (uid 0): lever does not take a lever.yaml from above your directory that someone else put there; give the one you mean with -c FILE\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, _ := os.ReadFile(inner)
			t.Cleanup(func() { os.Remove(inner); os.WriteFile(inner, data, 0o644) })
			if tc.setup != nil {
				tc.setup(t)
			}
			t.Chdir(tc.cwd)
			code, out, errs := runMain(plan...)
			if tc.want != "" {
				if code != 0 || out != want[tc.want] {
					t.Fatalf("exit %d, stderr %q; want the plan of %s", code, errs, tc.want)
				}
				return
			}
			if code != 2 || out != "" || errs != tc.err {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errs, tc.err)
			}
			// Refused before anything: a bring-up command makes no state either.
			if code, _, errs := runMain("up"); code != 2 || !strings.Contains(errs, inner) {
				t.Fatalf("up: exit %d, stderr %q", code, errs)
			}
			if _, err := os.Stat(state); err == nil {
				t.Fatalf("a refused lever.yaml made state in %s", state)
			}
		})
	}
	// -c names a file explicitly: the person chose it, so the search's checks do not apply.
	chmod(t, inner, 0o666)
	if got := planOf(inner); got != want[inner] {
		t.Errorf("-c on a world-writable file: a different plan")
	}
}

// TestConfigNotFound: no lever.yaml anywhere up to / is exit 2 saying how to give one.
func TestConfigNotFound(t *testing.T) {
	dir := t.TempDir()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, "lever.yaml")); err == nil {
			t.Skipf("%s/lever.yaml exists on this machine", d)
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	t.Chdir(dir)
	code, _, errs := runMain("ps")
	if want := "lever: no lever.yaml in " + dir + " or any directory above it: give one with -c FILE (lever init writes one)\n"; code != 2 || errs != want {
		t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, want)
	}
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Lchown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, allCommands(sub)...)
	}
	return out
}
