package orbstack

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A scenario is one recorded exchange with orb: the lever action to take, what it must
// produce, and each orb call lever must make, in order, with its exact argv and the output
// orb gives back. Scenario files live in testdata/scenarios; see the README there.
type scenario struct {
	headers map[string][]string
	steps   []step
}

type step struct {
	argv  []string
	stdin []string // expected stdin lines (nil: not checked)
	// scriptPart: stdin must be a guest.Script (marker nonce in its first line) whose text
	// holds this part; {M} in stdout stands for its marker.
	scriptPart string
	stdout     []string
	stderr     []string
	exit       int
	line       int
}

func parseScenario(r io.Reader) (*scenario, error) {
	s := &scenario{headers: map[string][]string{}}
	sc := bufio.NewScanner(r)
	n := 0
	var cur *step
	for sc.Scan() {
		n++
		l := sc.Text()
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "$ orb"):
			argv, err := splitWords(strings.TrimPrefix(l, "$ orb"))
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			// {bootstrap} stands for the whole pre-firewall script, one argv word.
			for i := range argv {
				if argv[i] == "{bootstrap}" {
					argv[i] = bootstrapScript
				}
			}
			s.steps = append(s.steps, step{argv: argv, line: n})
			cur = &s.steps[len(s.steps)-1]
		case cur != nil && (l == ">" || strings.HasPrefix(l, "> ")):
			cur.stdout = append(cur.stdout, strings.TrimPrefix(strings.TrimPrefix(l, ">"), " "))
		case cur != nil && (l == "2>" || strings.HasPrefix(l, "2> ")):
			cur.stderr = append(cur.stderr, strings.TrimPrefix(strings.TrimPrefix(l, "2>"), " "))
		case cur != nil && l == "< {containment}":
			cur.scriptPart = guestCheck
		case cur != nil && (l == "<" || strings.HasPrefix(l, "< ")):
			cur.stdin = append(cur.stdin, strings.TrimPrefix(strings.TrimPrefix(l, "<"), " "))
		case cur != nil && strings.HasPrefix(l, "exit "):
			code, err := strconv.Atoi(strings.TrimPrefix(l, "exit "))
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			cur.exit = code
		case cur == nil && strings.Contains(l, ": "):
			k, v, _ := strings.Cut(l, ": ")
			s.headers[k] = append(s.headers[k], v)
		default:
			return nil, fmt.Errorf("line %d: cannot read %q", n, l)
		}
	}
	return s, sc.Err()
}

// splitWords splits like a shell for the simple quoting the fixtures use: spaces
// separate words, '...' quotes.
func splitWords(s string) ([]string, error) {
	var out []string
	var b strings.Builder
	in, quoted := false, false
	for _, r := range s {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			b.WriteRune(r)
		case r == '\'':
			quoted, in = true, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteRune(r)
			in = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if in {
		out = append(out, b.String())
	}
	return out, nil
}

// The fake orb is this test binary run again with LEVER_FAKE_ORB set: HostExec execs it
// like the real orb, so the real exec path (argv, stdin, stdout, stderr, exit status) is
// what the tests exercise.
const (
	fakeEnv   = "LEVER_FAKE_ORB"       // the scenario file, placeholders already filled
	fakeState = "LEVER_FAKE_ORB_STATE" // a file holding the index of the next step
)

func TestMain(m *testing.M) {
	if p := os.Getenv(fakeEnv); p != "" {
		os.Exit(fakeOrb(p, os.Getenv(fakeState), os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeOrb replays one step. A call that is not the next recorded one fails with exit 97
// and leaves the complaint in <state>.err for the test to report.
func fakeOrb(scenarioPath, statePath string, args []string) int {
	fail := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		os.WriteFile(statePath+".err", []byte(msg), 0o644)
		fmt.Fprintln(os.Stderr, "fake orb: "+msg)
		return 97
	}
	f, err := os.Open(scenarioPath)
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()
	s, err := parseScenario(f)
	if err != nil {
		return fail("%v", err)
	}
	raw, _ := os.ReadFile(statePath)
	i, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	if i >= len(s.steps) {
		return fail("unexpected call %q after the last recorded step", args)
	}
	st := s.steps[i]
	if !slicesEqual(args, st.argv) {
		return fail("step %d (line %d): argv %q, recorded %q", i+1, st.line, args, st.argv)
	}
	// A guest.Script on stdin sets its marker nonce in its first line; recorded output
	// writes the marker as {M} and gets this call's.
	var in []byte
	if st.stdin != nil || st.scriptPart != "" {
		in, _ = io.ReadAll(os.Stdin)
	}
	mark := ""
	if first, _, _ := strings.Cut(string(in), "\n"); strings.HasPrefix(first, "M='@@lever-") {
		mark = strings.TrimSuffix(strings.TrimPrefix(first, "M='"), "'")
	}
	if st.stdin != nil {
		if want := strings.Join(st.stdin, "\n") + "\n"; string(in) != want {
			return fail("step %d (line %d): stdin %q, recorded %q", i+1, st.line, in, want)
		}
	}
	if st.scriptPart != "" && (mark == "" || !strings.Contains(string(in), "\n"+st.scriptPart)) {
		return fail("step %d (line %d): stdin is not a guest script carrying %q:\n%s", i+1, st.line, st.scriptPart, in)
	}
	os.WriteFile(statePath, []byte(strconv.Itoa(i+1)), 0o644)
	for _, l := range st.stdout {
		fmt.Fprintln(os.Stdout, strings.ReplaceAll(l, "{M}", mark))
	}
	for _, l := range st.stderr {
		fmt.Fprintln(os.Stderr, l)
	}
	return st.exit
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fake arms the fake orb for one scenario file (placeholders replaced by repl) and
// returns an Exec that runs it, plus a check that every recorded step was consumed.
func fake(t *testing.T, file string, repl *strings.Replacer) (HostExec, *scenario, func()) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	filled := repl.Replace(string(raw))
	s, err := parseScenario(bytes.NewReader([]byte(filled)))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	dir := t.TempDir()
	sp, state := dir+"/scenario.txt", dir+"/state"
	if err := os.WriteFile(sp, []byte(filled), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(fakeEnv, sp)
	t.Setenv(fakeState, state)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	done := func() {
		t.Helper()
		if msg, err := os.ReadFile(state + ".err"); err == nil {
			t.Errorf("%s: %s", file, msg)
		}
		raw, _ := os.ReadFile(state)
		got, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		if got != len(s.steps) {
			t.Errorf("%s: lever made %d of the %d recorded orb calls", file, got, len(s.steps))
		}
	}
	return HostExec{Path: self}, s, done
}

// The fake is not a rubber stamp: a call with any other argv than the recorded one fails
// with exit 97 and a complaint naming both.
func TestFakeRefusesOtherArgv(t *testing.T) {
	dir := t.TempDir()
	sp := dir + "/s.txt"
	os.WriteFile(sp, []byte("$ orb create --isolated --mount /a:/lever debian:bookworm lever-demo\n"), 0o644)
	t.Setenv(fakeEnv, sp)
	t.Setenv(fakeState, dir+"/state")
	self, _ := os.Executable()
	// Same command but a second mount smuggled in.
	_, stderr, code, err := HostExec{Path: self}.Run(context.Background(),
		[]string{"create", "--isolated", "--mount", "/a:/lever", "--mount", "/Users:/mnt", "debian:bookworm", "lever-demo"}, nil)
	if err != nil || code != 97 {
		t.Fatalf("exit %d err %v, want 97", code, err)
	}
	msg, _ := os.ReadFile(dir + "/state.err")
	if !strings.Contains(string(msg), `recorded ["create" "--isolated" "--mount" "/a:/lever" "debian:bookworm" "lever-demo"]`) || !strings.Contains(string(stderr), "fake orb: step 1") {
		t.Fatalf("complaint %q / stderr %q", msg, stderr)
	}
}
