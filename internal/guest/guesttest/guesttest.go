// Package guesttest is the shared fake for lever's guest seam (guest.Runner): a Runner
// that answers each command from a script of rules and records every call, so code that
// drives a guest (bring-up's steps, egress, provisioning) is unit-tested without one.
// It is for tests only: no production package may import it.
package guesttest

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/lever-jail/lever/internal/guest"
)

// Reply answers one guest command.
type Reply func(c guest.Cmd) (guest.Result, error)

// Rule answers the commands Match selects; Name is how the recorder names them.
type Rule struct {
	Name  string
	Match func(c guest.Cmd) bool
	Reply Reply
}

// Call is one recorded guest command and the rule that answered it ("" when none did).
type Call struct {
	Cmd  guest.Cmd
	Rule string
}

// Runner is a scripted guest.Runner: the first rule whose Match selects a command
// answers it; a command no rule selects fails the test through Unmatched (exit 127 and
// an error result, so the code under test sees a failure, not a silent success). Down
// makes every call fail to reach the guest.
type Runner struct {
	mu    sync.Mutex
	rules []Rule
	calls []Call
	// Down, when set, is the error every call returns (the guest is not reachable).
	Down error
}

var _ guest.Runner = (*Runner)(nil)

// On adds a rule; later rules are tried after earlier ones.
func (r *Runner) On(name string, match func(guest.Cmd) bool, reply Reply) *Runner {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rules = append(r.rules, Rule{Name: name, Match: match, Reply: reply})
	return r
}

// OnFirst adds a rule tried before every rule added so far (a test's own rule ahead of a
// shared fixture's broader ones).
func (r *Runner) OnFirst(name string, match func(guest.Cmd) bool, reply Reply) *Runner {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rules = append([]Rule{{Name: name, Match: match, Reply: reply}}, r.rules...)
	return r
}

// Run implements guest.Runner.
func (r *Runner) Run(_ context.Context, c guest.Cmd) (guest.Result, error) {
	r.mu.Lock()
	down := r.Down
	var rule *Rule
	if down == nil {
		for i := range r.rules {
			if r.rules[i].Match(c) {
				rule = &r.rules[i]
				break
			}
		}
	}
	name := ""
	if rule != nil {
		name = rule.Name
	}
	r.calls = append(r.calls, Call{Cmd: c, Rule: name})
	r.mu.Unlock()
	if down != nil {
		return guest.Result{}, down
	}
	if rule == nil {
		return guest.Result{ExitCode: 127, Stderr: []byte("guesttest: no rule for " + strings.Join(c.Argv, " "))}, nil
	}
	return rule.Reply(c)
}

// Calls returns every recorded call, in order.
func (r *Runner) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// Names are the rules that answered the calls, in order ("?" for an unmatched call).
func (r *Runner) Names() []string {
	var out []string
	for _, c := range r.Calls() {
		n := c.Rule
		if n == "" {
			n = "?" + strings.Join(c.Argv(), " ")
		}
		out = append(out, n)
	}
	return out
}

// Argv is the call's argv.
func (c Call) Argv() []string { return c.Cmd.Argv }

// Unmatched are the calls no rule answered.
func (r *Runner) Unmatched() []Call {
	var out []Call
	for _, c := range r.Calls() {
		if c.Rule == "" {
			out = append(out, c)
		}
	}
	return out
}

// Reset forgets the recorded calls (the rules stay).
func (r *Runner) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = nil
}

// Script matches a command whose script (stdin, or an sh -c argument) contains every
// one of the fragments.
func Script(fragments ...string) func(guest.Cmd) bool {
	return func(c guest.Cmd) bool {
		text := string(c.Stdin) + "\x00" + strings.Join(c.Argv, "\x00")
		for _, f := range fragments {
			if !strings.Contains(text, f) {
				return false
			}
		}
		return true
	}
}

// Argv0 matches a command whose argv starts with the words given.
func Argv0(words ...string) func(guest.Cmd) bool {
	return func(c guest.Cmd) bool {
		if len(c.Argv) < len(words) {
			return false
		}
		for i, w := range words {
			if c.Argv[i] != w {
				return false
			}
		}
		return true
	}
}

// OK answers with stdout and exit 0.
func OK(stdout string) Reply {
	return func(guest.Cmd) (guest.Result, error) { return guest.Result{Stdout: []byte(stdout)}, nil }
}

// Exit answers with an exit status and stderr.
func Exit(code int, stderr string) Reply {
	return func(guest.Cmd) (guest.Result, error) {
		return guest.Result{ExitCode: code, Stderr: []byte(stderr)}, nil
	}
}

// Sec is one section of a sections-format answer.
type Sec struct {
	Name string
	Out  string
	RC   int
}

// Sections answers a guest.Script in the sections format, with the marker nonce the
// script's first line set (as the guest's sh would print it). secs may be a function of
// the command (its positional parameters, its environment).
func Sections(secs func(c guest.Cmd) []Sec) Reply {
	return func(c guest.Cmd) (guest.Result, error) {
		mark, err := ScriptMark(c)
		if err != nil {
			return guest.Result{}, err
		}
		var b strings.Builder
		for _, s := range secs(c) {
			fmt.Fprintf(&b, "%sbegin %s\n", mark, s.Name)
			if s.Out != "" {
				b.WriteString(strings.TrimSuffix(s.Out, "\n") + "\n")
			}
			fmt.Fprintf(&b, "%send %s %d\n", mark, s.Name, s.RC)
		}
		return guest.Result{Stdout: []byte(b.String())}, nil
	}
}

// ScriptMark is the section marker a guest.Script's first line sets.
func ScriptMark(c guest.Cmd) (string, error) {
	first, _, _ := strings.Cut(string(c.Stdin), "\n")
	if !strings.HasPrefix(first, "M='@@lever-") {
		return "", fmt.Errorf("guesttest: not a guest.Script (first line %q)", first)
	}
	return strings.TrimSuffix(strings.TrimPrefix(first, "M='"), "'"), nil
}

// Env is the value of NAME in the command's leading `env NAME=value ...` words.
func Env(c guest.Cmd, name string) string {
	if len(c.Argv) == 0 || c.Argv[0] != "env" {
		return ""
	}
	for _, a := range c.Argv[1:] {
		if k, v, ok := strings.Cut(a, "="); ok && k == name {
			return v
		}
		if !strings.Contains(a, "=") {
			break
		}
	}
	return ""
}

// Args are a guest.Script command's positional parameters (after `sh -s --`).
func Args(c guest.Cmd) []string {
	for i := 0; i+2 < len(c.Argv); i++ {
		if c.Argv[i] == "sh" && c.Argv[i+1] == "-s" && c.Argv[i+2] == "--" {
			return c.Argv[i+3:]
		}
	}
	return nil
}
