package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/events"
)

// TestBinaryAnswerFromElsewhere: lev answer answers an interactive run's pending
// question through the daemon's API, with the terminal's semantics, while lev run's
// terminal prompt for it is showing; the terminal then withdraws its prompt and asks the
// next question as usual. The run is the gate script of
// TestBinaryRunOnATerminalAnswersAskAndGate: a permission ask (answered once by lev
// answer), a gate prompt (answered no at the terminal), a gate prompt (answered once by
// lev answer), so the events record the same trail as when the terminal answers all
// three, and each gate event carries the labels that drove it (the context's taint, the
// tool's clearance), which lever dashboard's run page shows. Refused, changing nothing: session to a permission prompt (the terminal offers
// yes or no only), an answer outside the prompt's set, a question that is not pending, a
// run that does not exist.
func TestBinaryAnswerFromElsewhere(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	j := newJailEnv(t)
	home := j.root
	mustWrite(t, filepath.Join(home, "secret", "key.txt"), "s3cr3t")
	mustWrite(t, j.script, strings.ReplaceAll(modelScript("gate-script.toml"), "HOME", home))
	mustWrite(t, filepath.Join(j.runLever, "config.toml"), "[agent_read_paths.gate]\nallow = [\"~/secret\"]\n")
	mustWrite(t, filepath.Join(j.runLever, "agents", "gate.toml"), gateBlueprint)
	serveWith(t, bin, j.env, "unix:"+j.sock)

	var stdout bytes.Buffer
	r := startOnPty(t, bin, j.env, j.wd, &stdout, "run", "gate")
	cmd, ptmx, out, exited := r.cmd, r.ptmx, r.out, r.exited

	out.waitFor(t, "[y]es / [N]o? ", 1, 30*time.Second)
	out.mu.Lock()
	id := regexpRunID(t, out.buf.String())
	out.mu.Unlock()
	for _, bad := range []struct{ name, run, q, ans, want string }{
		{"session to a permission prompt", id, "q1", "session", `bad answer "session" to q1's permission prompt (want once, deny)`},
		{"an answer outside the set", id, "q1", "yes", `bad answer "yes"`},
		{"a question not pending", id, "q2", "once", `has no pending question "q2"`},
		{"no such run", "r-nosuchrun", "q1", "once", `no run "r-nosuchrun"`},
	} {
		so, se, code := runLev(t, bin, j.env, "answer", bad.run, bad.q, bad.ans)
		if code != 2 || !strings.Contains(se, bad.want) || so != "" {
			t.Errorf("%s: lev answer exit %d, stdout %q, stderr %q; want exit 2 naming %q", bad.name, code, so, se, bad.want)
		}
	}
	// The control: the pending question, a terminal answer.
	if so, se, code := runLev(t, bin, j.env, "answer", id, "q1", "once"); code != 0 || !strings.Contains(so, "answered q1 of run "+id) {
		t.Fatalf("lev answer %s q1 once: exit %d\n%s%s", id, code, so, se)
	}
	out.waitFor(t, "(q1 has its answer: this prompt is withdrawn)", 1, 10*time.Second)
	out.waitFor(t, "allow [o]nce / for the [s]ession / [N]o? ", 1, 30*time.Second)
	ptmx.Write([]byte("n\n"))
	out.waitFor(t, "allow [o]nce / for the [s]ession / [N]o? ", 2, 30*time.Second)
	if so, se, code := runLev(t, bin, j.env, "answer", id, "q3", "once"); code != 0 {
		t.Fatalf("lev answer %s q3 once: exit %d\n%s%s", id, code, so, se)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("lev run: %v\nterminal:\n%s", err, out.buf.String())
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("lev run did not end; terminal:\n%s", out.buf.String())
	}
	if stdout.String() != "done\n" {
		t.Fatalf("result %q", stdout.String())
	}
	tl, err := events.NewTail(filepath.Join(j.levHome, "runs", id, events.FileName))
	if err != nil {
		t.Fatal(err)
	}
	evs, _ := tl.Next(1000)
	tl.Close()
	var trail []string
	for _, ev := range evs {
		switch ev.Type {
		case events.Ask:
			trail = append(trail, "ask:"+ev.Tool+":"+map[bool]string{true: "gate", false: "permission"}[ev.GatePrompt])
		case events.AnswerT:
			trail = append(trail, "answer:"+ev.Answer)
		case events.Gate:
			trail = append(trail, "gate:"+ev.Tool+":"+ev.Source+":"+ev.Taint+"/"+ev.Clearance)
		}
	}
	want := "ask:shell:permission answer:once ask:shell:gate answer:deny gate:shell:UserDeny:private/internal ask:submit_output:gate answer:once gate:submit_output:UserAllowOnce:private/internal"
	if got := strings.Join(trail, " "); got != want {
		t.Fatalf("events trail\n got %s\nwant %s\nterminal:\n%s", got, want, out.buf.String())
	}
	if n := strings.Count(out.buf.String(), "has its answer: this prompt is withdrawn"); n != 2 {
		t.Errorf("%d prompts withdrawn on the terminal, want 2 (q1, q3)", n)
	}
}
