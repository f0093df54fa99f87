package bringup

import (
	"fmt"
	"io"
	"time"

	"github.com/lever-jail/lever/internal/hostterm"
)

// progress prints a bring-up's steps: one line each, "[i/n] id verb time detail". On a
// terminal the step shows while it runs and its result line replaces it.
type progress struct {
	w   io.Writer
	tty bool
	n   int
}

func newProgress(w io.Writer, n int) progress {
	return progress{w: w, tty: hostterm.IsTerminal(w), n: n}
}

func (p progress) running(i int, id string) {
	if p.tty {
		fmt.Fprintf(p.w, "[%d/%d] %-9s ...", i+1, p.n, id)
	}
}

func (p progress) clear() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func (p progress) failed(i int, id string, d time.Duration, err error) {
	p.clear()
	fmt.Fprintf(p.w, "[%d/%d] %-9s FAILED after %s: %s\n", i+1, p.n, id, round(d), p.text(err.Error(), hostterm.Escape))
}

func (p progress) done(i int, sr StepResult) {
	p.clear()
	verb := "ok     "
	if sr.Changed {
		verb = "changed"
	}
	fmt.Fprintf(p.w, "[%d/%d] %-9s %s %7s  %s\n", i+1, p.n, sr.ID, verb, round(sr.Duration), p.text(sr.Detail, hostterm.EscapeLine))
}

// text is a step's detail or error as a progress line shows it: on a terminal, with every
// character a terminal would not draw as itself escaped by esc (it can quote the guest,
// or a name from the tree the agents write); a detail stays on its line, an error may
// quote several.
func (p progress) text(s string, esc func(string) string) string {
	if p.tty {
		return esc(s)
	}
	return s
}

func (p progress) summary(name string, res *Result) {
	if res.Changed {
		fmt.Fprintf(p.w, "jail %s is up (%s, %d guest calls)\n", name, round(res.Duration), res.GuestCalls)
	} else {
		fmt.Fprintf(p.w, "jail %s is up: nothing changed (%s, %d guest calls)\n", name, round(res.Duration), res.GuestCalls)
	}
}

// PrintPlan prints a plan (apply/up --dry-run): one line per step of the same table
// Execute walks, in its order.
func PrintPlan(w io.Writer, plan []Planned) {
	for i, s := range plan {
		fmt.Fprintf(w, "%d. %-9s %-6s %s\n", i+1, s.ID, s.Action, s.Why)
	}
	if !Changed(plan) {
		fmt.Fprintln(w, "nothing to change (egress is verified again on apply)")
	}
}

func round(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}
