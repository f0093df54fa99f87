//go:build e2e

package bringup_test

import (
	"bytes"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/backend/netns"
	"github.com/lever-jail/lever/internal/cli"
	"github.com/lever-jail/lever/internal/testutil"
)

// updateSession rewrites docs/session.md from this run (make transcript).
var updateSession = flag.Bool("update-session", false, "rewrite docs/session.md from this session")

// sessionRunUser is the netns run user of the session's jail.
const sessionRunUser = "lvsession"

// sessionDoc is the transcript, relative to this package.
const sessionDoc = "../../docs/session.md"

// sessionHead is docs/session.md above the transcript.
const sessionHead = `# A session, as it prints

One operator's first session on the netns substrate, every command as typed and everything
it printed (stdout and stderr, in the order written; for ` + "`lever run`" + `, whose two streams come
from the container, its progress and then its result), from an empty project directory:
` + "`lever init`, `up`, `run`, `ps`, `logs`, `result`, `shell`, `stop`, `destroy`" + `. The
commands are run from the project directory and its ` + "`src`" + ` subdirectory without ` + "`-c`" + `: lever
finds ` + "`lever.yaml`" + ` upward, as git finds ` + "`.git`" + ` (docs/daily.md, "Which lever.yaml").

It is not written by hand: ` + "`make transcript`" + ` runs ` + "`bringup.TestSessionTranscript`" + `
(internal/bringup/session_e2e_test.go, root, real iptables, namespaces and rootless podman;
the model is a scripted stand-in on loopback behind the broker) with ` + "`-update-session`" + `,
which rewrites this file; without the flag the same test compares the session with this
file and fails on any difference, so the page cannot drift from what lever prints. What
changes from run to run is replaced before the comparison: the temporary directory by
` + "`/home/you`" + `, ports, run ids, clock times, durations, process ids, addresses and counts.
`

// TestSessionTranscript runs the operator's first session through the commands a user
// types and holds docs/session.md to what they printed. Each step's exit code is checked
// (the wrong call exits 2 with the call it meant), the result prints as text, and the file
// the agent wrote is in the host's tree.
func TestSessionTranscript(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	testutil.RequireTool(t, "iptables")
	doc, err := filepath.Abs(sessionDoc) // before the session changes directory
	if err != nil {
		t.Fatal(err)
	}
	dir, proj, _ := netnsProject(t, "lvss")
	// A run user of this session's own: the default one may belong to another jail up on
	// this machine, and destroy removes the run user it made.
	t.Setenv(netns.RunUserEnv, sessionRunUser)
	t.Chdir(proj)

	var transcript bytes.Buffer
	// run's progress (stderr) and result (stdout) are lev's two streams in the container:
	// conmon reads them from two pipes, so which of two writes made at once arrives first
	// is not kept (the result line came before the last progress lines in some runs).
	// For that command the transcript shows stderr, then stdout; for the others the two
	// are written by lever itself, in order.
	split := map[string]bool{"run": true}
	step := func(wantCode int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		var code int
		if split[args[0]] {
			code = cli.Main(args, &out, &errOut)
			errOut.Write(out.Bytes())
			out = errOut
		} else {
			code = cli.Main(args, &out, &out)
		}
		fmt.Fprintf(&transcript, "$ lever %s\n%s", shellLine(args), out.String())
		if code != 0 {
			fmt.Fprintf(&transcript, "[exit %d]\n", code)
		}
		transcript.WriteString("\n")
		if code != wantCode {
			t.Fatalf("lever %s: exit %d, want %d\n%s", shellLine(args), code, wantCode, out.String())
		}
		return out.String()
	}

	step(0, "init")
	cfgPath := filepath.Join(proj, "lever.yaml")
	yml, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(yml, []byte("\nbackend: netns\n")) {
		t.Fatalf("lever init chose another backend than netns here; this session is netns's:\n%s", yml)
	}

	// What the operator edits after init: the key, and (for this test) the model upstream
	// and two free ports, so that the session runs beside other jails.
	keyFile := filepath.Join(dir, "api-key")
	os.WriteFile(keyFile, []byte("sk-session-test-key\n"), 0o600)
	model := &testutil.StandIn{Steps: []testutil.Step{
		{Tool: "list_dir", Args: map[string]string{"path": "."}},
		{Tool: "write_file", Args: map[string]string{"path": "NOTES.md", "content": "# proj\n\nOne C file (src/main.c) that returns 0.\n"}},
		{Tool: "submit_output", Args: map[string]string{"output": "Wrote NOTES.md: the project is one C file, src/main.c."}},
	}}
	srv := httptest.NewServer(model)
	defer srv.Close()
	jailPort, adminPort := freePort(t), freePort(t)
	edited := editInitYAML(t, string(yml), []yamlEdit{
		{`(?m)^  allow_ports: .*$`, fmt.Sprintf("  allow_ports: [%d]", jailPort)},
		{`(?m)^  api_key_file: .*$`, "  api_key_file: " + keyFile},
		{`(?m)^  llm_upstream: .*$`, "  llm_upstream: " + srv.URL + "/v1"},
		{`(?m)^  jail_port: .*$`, fmt.Sprintf("  jail_port: %d", jailPort)},
		{`(?m)^  admin_port: .*$`, fmt.Sprintf("  admin_port: %d", adminPort)},
	})
	os.WriteFile(cfgPath, []byte(edited), 0o644)
	os.MkdirAll(filepath.Join(proj, "src"), 0o777)
	os.Chmod(filepath.Join(proj, "src"), 0o777)
	os.WriteFile(filepath.Join(proj, "src", "main.c"), []byte("int main(void) { return 0; }\n"), 0o644)
	fmt.Fprintf(&transcript, "# (edited lever.yaml: api_key_file %s; llm_upstream, the test's stand-in model; jail_port, admin_port, allow_ports: free ports)\n\n", keyFile)
	t.Cleanup(func() { cli.Main([]string{"destroy", "-c", cfgPath}, &bytes.Buffer{}, &bytes.Buffer{}) })

	step(0, "up", "--yes")
	t.Chdir(filepath.Join(proj, "src"))
	out := step(0, "run", "--input", "Write NOTES.md saying what this project is.")
	const result = "Wrote NOTES.md: the project is one C file, src/main.c.\n"
	if !strings.HasSuffix(out, result) {
		t.Errorf("lever run did not end with the result as text %q", result)
	}
	if got, err := os.ReadFile(filepath.Join(proj, "NOTES.md")); err != nil || !strings.Contains(string(got), "One C file") {
		t.Errorf("NOTES.md in the host's tree: %q, %v", got, err)
	}
	out = step(0, "ps")
	id := regexp.MustCompile(`r-\d{8}-\d{6}-[0-9a-f]{6}`).FindString(out)
	if id == "" {
		t.Fatalf("no run id in lever ps:\n%s", out)
	}
	step(2, "ps", "../lever.yaml")
	step(0, "logs", id)
	if out := step(0, "result", id); out != result {
		t.Errorf("lever result printed %q, want %q", out, result)
	}
	step(0, "shell", "--", "cat", "/lever/NOTES.md")
	t.Chdir(proj)
	step(0, "stop")
	step(0, "destroy")

	got := sessionHead + "\n```\n" + normaliseSession(transcript.String(), dir, jailPort, adminPort) + "```\n"
	if *updateSession {
		if err := os.WriteFile(doc, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", doc)
		return
	}
	want, err := os.ReadFile(doc)
	if err != nil {
		t.Fatalf("%v (make transcript writes it)", err)
	}
	if string(want) != got {
		t.Errorf("docs/session.md is not what this session printed (make transcript rewrites it); this session:\n%s", got)
	}
}

// shellLine is argv as typed at a shell.
func shellLine(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"$`\\*?[]#~;&|<>(){}") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// normaliseSession replaces what differs between two runs of the same session.
func normaliseSession(s, dir string, jailPort, adminPort int) string {
	s = strings.ReplaceAll(s, dir, "/home/you")
	ids := map[string]string{}
	s = regexp.MustCompile(`r-\d{8}-\d{6}-[0-9a-f]{6}`).ReplaceAllStringFunc(s, func(id string) string {
		if _, ok := ids[id]; !ok {
			ids[id] = fmt.Sprintf("r-20261205-101500-a1b2c%d", len(ids))
		}
		return ids[id]
	})
	for _, r := range []struct{ re, with string }{
		{`\b` + strconv.Itoa(jailPort) + `\b`, "7443"},
		{`\b` + strconv.Itoa(adminPort) + `\b`, "7444"},
		{`127\.0\.0\.1:\d+`, "127.0.0.1:PORT"},
		{`\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b`, "2026-12-05 10:15:00"},
		{`\b\d\d:\d\d:\d\d\.\d{3}\b`, "10:15:00.000"},
		{`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`, "2026-12-12T10:15:00Z"},
		{`\(in [0-9hms.]+\)`, "(in 168h0m0s)"},
		// durations, one form whatever their unit (a step near 1s prints ms or s); a step's
		// is right-aligned, so its padding is the raw figure's width
		{` *\b\d+(\.\d+)?(ns|µs|ms|s|m)\b`, " Ns"},
		{`\b10\.\d+\.\d+\.\d+\b`, "10.200.0.1"},
		{`/run/user/\d+`, "/run/user/UID"},
		// content hashes: of lev's binary, the workbench's packages, lev's settings, paths
		{`\b(lev|bench)-[0-9a-f]{12}-[0-9a-f]{8}\b`, "$1-0123456789ab-01234567"},
		{`lev settings [0-9a-f]{12}`, "lev settings 0123456789ab"},
		{`accepted-config/[0-9a-f]+\.yaml`, "accepted-config/0123456789abcdef.yaml"},
		// what this machine's packages make of the workbench
		{`\d+ of its packages`, "N of its packages"},
		{`\d+ files linked`, "N files linked"},
		{`\d+ copied`, "N copied"},
		{`\d+ setuid`, "N setuid"},
		{`\bpid \d+`, "pid N"},
		{`\(\d+ entries`, "(N entries"},
	} {
		s = regexp.MustCompile(r.re).ReplaceAllString(s, r.with)
	}
	return s
}
