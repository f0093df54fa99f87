package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/taint"
)

const gateBlueprint = `name = "gate"
version = "1"
[read_paths]
allow = ["~/secret"]
[stages.s]
prompt = "p"
tools = ["read_file", "shell", "submit_output"]
`

// turn 1 reads a granted Private file; turn 2's shell asks permission (answered yes) and
// then the taint gate (Private data, shell may send it off: answered deny); turn 3's
// final answer goes through the gate too (answered once) so the run completes.
// ptyOutput collects what the terminal shows and lets the test wait for the n-th
// occurrence of a prompt.
type ptyOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (p *ptyOutput) waitFor(t *testing.T, s string, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		c := strings.Count(p.buf.String(), s)
		p.mu.Unlock()
		if c >= n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Fatalf("no %d× %q on the terminal; it shows:\n%s", n, s, p.buf.String())
}

// ptyRun is a lev command started on a pseudo-terminal: the terminal is its stdin and
// stderr (and its stdout unless the test takes that apart), read into out as it shows.
type ptyRun struct {
	cmd     *exec.Cmd
	ptmx    *os.File      // the test's end: what it writes is typed
	out     *ptyOutput    // what the terminal has shown
	exited  chan error    // cmd.Wait's result
	drained chan struct{} // closed once the terminal is read to its end (EIO)
}

// startOnPty starts `bin args...` in dir with env on a new pseudo-terminal; stdout nil
// sends the command's stdout to the terminal too. The terminal is closed when the test ends.
func startOnPty(t *testing.T, bin string, env []string, dir string, stdout io.Writer, args ...string) *ptyRun {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close() })
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdin, cmd.Stderr, cmd.Stdout = tty, tty, tty
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	r := &ptyRun{cmd: cmd, ptmx: ptmx, out: &ptyOutput{}, exited: make(chan error, 1), drained: make(chan struct{})}
	go func() {
		defer close(r.drained)
		b := make([]byte, 4096)
		for {
			n, err := ptmx.Read(b)
			r.out.mu.Lock()
			r.out.buf.Write(b[:n])
			r.out.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { r.exited <- cmd.Wait() }()
	return r
}

// TestBinaryRunOnATerminalAnswersAskAndGate drives `lev run` on a pseudo-terminal, no
// human: the prompts come from the live event stream; the test answers the shell's ask
// permission "y", the taint gate's prompt for the same call "n" (deny), and the gate's
// prompt for the final answer "o" (once). Both decisions are then in the record
// (tool_calls.jsonl: approved when asked, refused at the gate by UserDeny; events.jsonl:
// ask/answer pairs and the gate event) and in taint_audit.json (UserDeny for shell:
// a call that reached the gate, which only a "yes" to the ask lets it do; UserAllowOnce
// for the answer). The command the gate denied never ran.
func TestBinaryRunOnATerminalAnswersAskAndGate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildLev(t)
	j := newJailEnv(t)
	home := j.root // HOME in the jail env
	mustWrite(t, filepath.Join(home, "secret", "key.txt"), "s3cr3t")
	mustWrite(t, j.script, strings.ReplaceAll(modelScript("gate-script.toml"), "HOME", home))
	mustWrite(t, filepath.Join(j.runLever, "config.toml"), "[agent_read_paths.gate]\nallow = [\"~/secret\"]\n")
	mustWrite(t, filepath.Join(j.runLever, "agents", "gate.toml"), gateBlueprint)
	serveWith(t, bin, j.env, "unix:"+j.sock)

	var stdout bytes.Buffer
	r := startOnPty(t, bin, j.env, j.wd, &stdout, "run", "gate")
	cmd, ptmx, out, exited := r.cmd, r.ptmx, r.out, r.exited

	out.waitFor(t, "[y]es / [N]o? ", 1, 30*time.Second)
	ptmx.Write([]byte("y\n"))
	out.waitFor(t, "allow [o]nce / for the [s]ession / [N]o? ", 1, 30*time.Second)
	ptmx.Write([]byte("n\n"))
	out.waitFor(t, "allow [o]nce / for the [s]ession / [N]o? ", 2, 30*time.Second)
	ptmx.Write([]byte("o\n"))
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
	id := regexpRunID(t, out.buf.String())
	runDir := filepath.Join(j.levHome, "runs", id)

	// The record: the shell call was approved when asked, then refused by the user at
	// the gate.
	var shell *callLine
	for _, c := range readCalls(t, runDir) {
		if c.Tool == "shell" {
			c := c
			shell = &c
		}
	}
	b, _ := os.ReadFile(filepath.Join(runDir, "stages", "0", "tool_calls.jsonl"))
	if shell == nil || shell.Refusal == nil || shell.Refusal.Step != "gate" || shell.Refusal.Code != string(taint.SourceUserDeny) ||
		!strings.Contains(string(b), "approved when asked") || strings.Contains(shell.Result, "leaked\n") {
		t.Fatalf("shell call in the record: %+v\n%s", shell, b)
	}
	// The events: ask (permission) answered once, ask (gate) answered deny, the gate's
	// UserDeny, ask (gate, the answer) answered once.
	tl, err := events.NewTail(filepath.Join(runDir, events.FileName))
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
			trail = append(trail, "gate:"+ev.Tool+":"+ev.Source)
		}
	}
	wantTrail := "ask:shell:permission answer:once ask:shell:gate answer:deny gate:shell:UserDeny ask:submit_output:gate answer:once gate:submit_output:UserAllowOnce"
	if strings.Join(trail, " ") != wantTrail {
		t.Fatalf("events trail\n got %s\nwant %s", strings.Join(trail, " "), wantTrail)
	}
	// taint_audit.json.
	audit, err := taint.ReadAudit(taint.AuditPath(runDir, 0))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range audit {
		got = append(got, r.Tool+":"+string(r.DecisionSource))
	}
	joined := strings.Join(got, " ")
	if !strings.Contains(joined, "shell:UserDeny") || !strings.Contains(joined, "submit_output:UserAllowOnce") {
		aj, _ := json.MarshalIndent(audit, "", " ")
		t.Fatalf("taint_audit.json lacks the decisions: %s\n%s", joined, aj)
	}
}
