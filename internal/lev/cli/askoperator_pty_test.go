package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBinaryAskOperatorOnATerminal: the agent's ask_operator question is put to the person
// at lev run's terminal (relayed like an ask prompt, through the live events), and the
// line typed there is what the agent gets back: the run's result is that answer. The
// question's control bytes are shown escaped, never sent to the terminal raw.
func TestBinaryAskOperatorOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	j := newJailEnv(t)
	mustWrite(t, j.script, `[[rule]]
turn = 1
[[rule.call]]
tool = "ask_operator"
args = '{"question": "which colour? \u001b[2J"}'
[[rule]]
turn = 2
[[rule.call]]
tool = "submit_output"
args = '{"output": "{{last}}"}'
`)
	mustWrite(t, filepath.Join(j.runLever, "agents", "asker.toml"), "name = \"asker\"\nversion = \"1\"\n[stages.s]\ntools = [\"ask_operator\", \"submit_output\"]\n")
	serveWith(t, bin, j.env, "unix:"+j.sock)

	var stdout bytes.Buffer
	r := startOnPty(t, bin, j.env, j.wd, &stdout, "run", "asker")
	cmd, ptmx, out, exited := r.cmd, r.ptmx, r.out, r.exited
	out.waitFor(t, "your answer (one line; empty: no answer)? ", 1, 30*time.Second)
	ptmx.Write([]byte("blue, from the terminal\n"))
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("lev run: %v\nterminal:\n%s", err, out.buf.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("lev run did not end; terminal:\n%s", out.buf.String())
	}
	term := out.buf.String()
	// The output is the JSON string the agent submitted, printed as its text (writeResult).
	if got := strings.TrimSpace(stdout.String()); got != "blue, from the terminal" {
		t.Fatalf("result %q\nterminal:\n%s", stdout.String(), term)
	}
	if !strings.Contains(term, "'s agent asks you: which colour? \\x1b[2J") || strings.Contains(term, "\x1b[2J") {
		t.Fatalf("the question on the terminal:\n%q", term)
	}
}
