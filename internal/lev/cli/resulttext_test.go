package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/lever-jail/lever/internal/lev/runner"
)

// TestResultPrintedAsText: a run's result is JSON, printed for a person as its text: a
// string unquoted (issue 28: `lever run` printed "done" with its quotes), an object
// indented, nothing for no result. The attack: a string whose JSON escapes decode to
// controls (\u001b]52 writes the clipboard) must reach a terminal neutralised, as the raw
// bytes would; to a pipe the decoded text is the script's data, unchanged (the control
// that the payload was decoded and passed).
func TestResultPrintedAsText(t *testing.T) {
	hostile, _ := json.Marshal("done " + payload)
	for _, tc := range []struct {
		name     string
		result   string
		pipe     string
		terminal string // "" when the same as pipe
	}{
		{"a string", `"done"`, "done\n", ""},
		{"a string ending in a newline", `"two\nlines\n"`, "two\nlines\n", ""},
		{"an object", `{"files":["a.go"],"ok":true}`, "{\n  \"files\": [\n    \"a.go\"\n  ],\n  \"ok\": true\n}\n", ""},
		{"a number", `42`, "42\n", ""},
		{"no result", ``, "", ""},
		{"escapes that decode to controls", string(hostile), "done " + payload + "\n", "done " + payloadShown + `\x0d\u009b2J\x7f` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &runner.Record{ID: "r-1", Status: runner.StatusCompleted, Result: json.RawMessage(tc.result)}
			var pipe bytes.Buffer
			if err := report(rec, false, &pipe); err != nil {
				t.Fatal(err)
			}
			if pipe.String() != tc.pipe {
				t.Errorf("pipe got %q, want %q", pipe.String(), tc.pipe)
			}
			want := tc.terminal
			if want == "" {
				want = tc.pipe
			}
			if got := onTerminal(t, rec); got != want {
				t.Errorf("terminal got %q, want %q", got, want)
			}
			// --json: the events carried the result; report prints nothing more.
			var js bytes.Buffer
			report(rec, true, &js)
			if js.Len() != 0 {
				t.Errorf("--json: report printed %q", js.String())
			}
		})
	}
}

// onTerminal is what report shows on a pseudo-terminal in raw mode (no \r\n translation).
func onTerminal(t *testing.T, rec *runner.Record) string {
	t.Helper()
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
	return string(got)
}
