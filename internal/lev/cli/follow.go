package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/hostterm"
	"github.com/lever-jail/lever/internal/lev/daemon"
	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// What lev prints of a run comes from the agent's side: the model's text, tool arguments,
// a failing command's output (a shell tool's stdout is an error event's message), an MCP
// server's errors, a tree blueprint's names. A prompt-injected agent chooses those bytes,
// and on a terminal an escape sequence among them could write the clipboard (OSC 52) or
// redraw the approval prompt to show another command. So every such field reaches the
// terminal through hostterm's neutraliser (controls shown as \x1b, \u009b), the one lever
// uses on the host too; the renderer's own layout (newlines, the prompt's indent) is all
// that is emitted raw.

// eventPrinter writes events as they come: one readable line each on w, or with asJSON one
// JSON line each.
type eventPrinter struct {
	w      io.Writer
	asJSON bool
}

func (p *eventPrinter) print(ev *events.Event) error {
	if p.asJSON {
		b, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", hostterm.EscapeJSON(b))
		return err
	}
	_, err := fmt.Fprintln(p.w, eventLine(ev))
	return err
}

// eventLine is one event as a person reads it: one line, whatever its fields hold
// (whitespace folded, every other control shown).
func eventLine(ev *events.Event) string {
	stage := ev.Stage
	if ev.StageIndex != nil {
		stage = fmt.Sprintf("%d:%s", *ev.StageIndex+1, ev.Stage)
	}
	var s string
	switch ev.Type {
	case events.RunStart:
		s = fmt.Sprintf("run %s of %s %s", ev.Run, ev.Agent, ev.Message)
	case events.StageStart:
		s = fmt.Sprintf("stage %s: start", stage)
	case events.StageEnd:
		s = fmt.Sprintf("stage %s: %s after %s", stage, ev.Status, plural(ev.Turn, "turn"))
		if ev.Error != "" {
			s += ": " + ev.Error
		}
	case events.Turn:
		if ev.Calls > 0 {
			s = fmt.Sprintf("stage %s turn %d: %s", stage, ev.Turn, plural(ev.Calls, "tool call"))
		} else {
			s = fmt.Sprintf("stage %s turn %d: answer (%d bytes)", stage, ev.Turn, ev.Bytes)
		}
	case events.ToolCall:
		s = fmt.Sprintf("tool %s %s: %s", ev.Tool, oneLine(string(ev.Args), 120), ev.Decision)
		if ev.Decision == events.Refused {
			s += fmt.Sprintf(" at %s: %s", ev.Step, oneLine(ev.Message, 200))
		}
	case events.ToolResult:
		s = fmt.Sprintf("tool %s: %s, %d bytes in %.0fms", ev.Tool, ev.Status, ev.Bytes, ev.DurationMS)
		if ev.Status == events.StatusError && ev.Message != "" {
			s += ": " + oneLine(ev.Message, 160)
		}
	case events.Ask:
		kind := "permission"
		switch {
		case ev.GatePrompt:
			kind = "taint gate"
		case ev.Operator:
			kind = "the agent asks you"
		}
		s = fmt.Sprintf("ask %s (%s): %s %s: %s", ev.Question, kind, ev.Tool, oneLine(string(ev.Args), 120), oneLine(ev.Message, 160))
	case events.AnswerT:
		s = fmt.Sprintf("answer %s: %s (%s)", ev.Question, ev.Answer, ev.Message)
	case events.Gate:
		s = fmt.Sprintf("gate %s: %s (%s)", ev.Tool, ev.Decision, ev.Source)
		if ev.Answer != "" {
			s += " answer " + ev.Answer
		}
		if ev.Message != "" {
			s += ": " + oneLine(ev.Message, 200)
		}
	case events.Result:
		s = fmt.Sprintf("result: %d bytes", ev.Bytes)
	case events.RunEnd:
		s = "run " + string(ev.Status)
		if ev.Step != "" {
			s += " at " + ev.Step
		}
		if ev.Error != "" {
			s += ": " + oneLine(ev.Error, 300)
		}
	default:
		s = string(ev.Type)
	}
	line := fmt.Sprintf("lev: %s #%d %s", ev.Time.Format("15:04:05.000"), ev.ID, s)
	return hostterm.EscapeLine(fold(line))
}

// fold turns every run of whitespace in s (newlines, CR, tabs, NEL) into one space.
func fold(s string) string { return strings.Join(strings.Fields(s), " ") }

// oneLine is s folded and cut at max bytes, on a rune boundary so the cut never leaves
// half a character.
func oneLine(s string, max int) string {
	s = fold(s)
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// prompter answers an interactive run's questions on the terminal, as their ask events
// arrive. A question can also be answered elsewhere (lever dashboard, through lev answer):
// then the terminal's prompt is withdrawn, and a line typed for it answers nothing.
type prompter struct {
	c   *daemon.Client
	in  *bufio.Reader
	out io.Writer

	mu      sync.Mutex
	want    *lineWant     // the prompt waiting for a line now, if any
	wake    chan struct{} // tells the line reader a prompt waits
	started bool
}

// lineWant is one prompt's wait for its line: only a line read after the prompt was shown
// answers it, so a line typed for a withdrawn prompt never answers the next one.
type lineWant struct {
	shown time.Time
	got   chan string // buffered 1
}

// readLine shows nothing itself: it waits for the line typed after shown, or for done
// (the question answered elsewhere, the run gone), and says which.
func (p *prompter) readLine(ctx context.Context, done <-chan struct{}) (string, bool) {
	w := &lineWant{shown: time.Now(), got: make(chan string, 1)}
	p.mu.Lock()
	if !p.started {
		p.started, p.wake = true, make(chan struct{}, 1)
		go p.reader()
	}
	p.want = w
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	withdraw := func() {
		p.mu.Lock()
		if p.want == w {
			p.want = nil
		}
		p.mu.Unlock()
	}
	select {
	case l := <-w.got:
		return l, true
	case <-done:
		withdraw()
		return "", false
	case <-ctx.Done():
		withdraw()
		return "", false
	}
}

// reader reads the terminal a line at a time, only while a prompt waits, and hands each
// line to the prompt shown before it was read (none: the line is dropped).
func (p *prompter) reader() {
	for range p.wake {
		line, _ := p.in.ReadString('\n')
		read := time.Now()
		p.mu.Lock()
		w := p.want
		if w != nil && !read.Before(w.shown) {
			p.want = nil
			w.got <- line
		}
		again := p.want != nil
		p.mu.Unlock()
		if again {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (p *prompter) handle(ctx context.Context, ev *events.Event) error {
	return p.handleUnless(ctx, ev, nil)
}

// handleUnless puts ev's question to the terminal and sends the answer typed there, unless
// answered closes first (the question was answered elsewhere): then the prompt is
// withdrawn and nothing is sent.
func (p *prompter) handleUnless(ctx context.Context, ev *events.Event, answered <-chan struct{}) error {
	if ev.Operator {
		return p.answerOperator(ctx, ev, answered)
	}
	opts := "[y]es / [N]o"
	if ev.GatePrompt {
		opts = "allow [o]nce / for the [s]ession / [N]o"
	}
	// The question shows the call's arguments as the event carries them, not cut and not
	// folded: a person approves what they read. Only controls are shown escaped, on the
	// question's one line; the layout around it is the prompter's own.
	q := fmt.Sprintf("lev: %s wants %s %s (%s)", ev.Run, ev.Tool, string(ev.Args), fold(ev.Message))
	fmt.Fprintf(p.out, "%s\n     %s? ", hostterm.EscapeLine(q), opts)
	line, ok := p.readLine(ctx, answered)
	if !ok {
		fmt.Fprintf(p.out, "\n     (%s has its answer: this prompt is withdrawn)\n", ev.Question)
		return nil
	}
	ans := runner.AnswerDeny
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes", "o", "once":
		ans = runner.AnswerOnce
	case "s", "session":
		if ev.GatePrompt {
			ans = runner.AnswerSession
		}
	}
	return p.c.Answer(ctx, ev.Run, ev.Question, ans)
}

// answerOperator puts ask_operator's question to the person at the terminal and sends
// their line of text back. The question is the agent's text: shown with controls escaped.
func (p *prompter) answerOperator(ctx context.Context, ev *events.Event, answered <-chan struct{}) error {
	q := fmt.Sprintf("lev: %s's agent asks you: %s", ev.Run, ev.Message)
	fmt.Fprintf(p.out, "%s\n     your answer (one line; empty: no answer)? ", hostterm.EscapeLine(q))
	line, ok := p.readLine(ctx, answered)
	if !ok {
		fmt.Fprintf(p.out, "\n     (%s has its answer: this prompt is withdrawn)\n", ev.Question)
		return nil
	}
	ans := strings.TrimRight(line, "\r\n")
	if strings.TrimSpace(ans) == "" {
		ans = runner.NoOperatorAnswer
	}
	return p.c.Answer(ctx, ev.Run, ev.Question, ans)
}

// follow streams a run's current leg from its run_start, answering its questions with p
// (nil: nobody answers), then reports the result: on stdout (the output; with asJSON the
// events already carried it) and as the exit code.
func follow(ctx context.Context, c *daemon.Client, p *prompter, rec *runner.Record, asJSON bool, stdout, stderr io.Writer) error {
	pr := &eventPrinter{w: stderr}
	if asJSON {
		pr = &eventPrinter{w: stdout, asJSON: true}
	}
	after := rec.FirstEvent - 1
	if after < 0 {
		after = 0
	}
	pending := map[string]chan struct{}{}
	var asking sync.WaitGroup
	_, err := c.Events(ctx, rec.ID, after, func(ev *events.Event) error {
		if err := pr.print(ev); err != nil {
			return err
		}
		if p == nil {
			return nil
		}
		// The prompt runs beside the stream, so that an answer given elsewhere (its
		// answer event) withdraws it.
		switch ev.Type {
		case events.Ask:
			done := make(chan struct{})
			pending[ev.Question] = done
			asking.Add(1)
			go func(ev events.Event) {
				defer asking.Done()
				if err := p.handleUnless(ctx, &ev, done); err != nil {
					fmt.Fprintln(stderr, "lev:", hostterm.EscapeLine(err.Error()))
				}
			}(*ev)
		case events.AnswerT, events.RunEnd:
			for q, done := range pending {
				if ev.Type == events.RunEnd || q == ev.Question {
					close(done)
					delete(pending, q)
				}
			}
		}
		return nil
	})
	for _, done := range pending {
		close(done)
	}
	asking.Wait()
	if err != nil && !errors.Is(err, daemon.ErrStreamEnded) {
		fmt.Fprintf(stderr, "lev: event stream: %s; waiting for the result\n", hostterm.EscapeLine(err.Error()))
	}
	final, err := c.Wait(ctx, rec.ID, 200*time.Millisecond)
	if err != nil {
		return err
	}
	return report(final, asJSON, stdout)
}

// report prints a finished run's result and turns its status into the exit code. The
// result is the model's output: its text (writeResult), shown neutralised on a terminal,
// passed unchanged to a file or a pipe (a script's data). The error, also the run's, goes out through Main,
// which neutralises it on a terminal.
func report(rec *runner.Record, asJSON bool, stdout io.Writer) error {
	switch rec.Status {
	case runner.StatusCompleted:
		if !asJSON {
			writeResult(stdout, rec.Result)
		}
		return nil
	case runner.StatusRefused:
		return exitcode.New(1, fmt.Errorf("run %s refused: %s", rec.ID, rec.Error))
	}
	return exitcode.New(1, fmt.Errorf("run %s %s: %s", rec.ID, rec.Status, rec.Error))
}

// runErr turns an API error about a run into the one-line error and exit code the
// commands share: an unknown run is a usage error (2), naming the id.
func runErr(id string, err error) error {
	var ae *daemon.APIError
	if errors.As(err, &ae) && ae.Code == 404 {
		return fmt.Errorf("no run %q (lev ps lists the runs)", id)
	}
	return fmt.Errorf("run %s: %w", id, err)
}

// forTerminal is s neutralised when w is a terminal, else s unchanged.
func forTerminal(w io.Writer, s string) string {
	if hostterm.IsTerminal(w) {
		return hostterm.Escape(s)
	}
	return s
}
