package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// Question is a pending prompt of an interactive run, shown in run.json until answered.
type Question struct {
	ID     string          `json:"id"`
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args,omitempty"`
	Reason string          `json:"reason"`
	Gate   bool            `json:"gate,omitempty"` // the taint gate asks: once / session / deny
	// Operator: an ask_operator question; the answer is the operator's own text.
	Operator bool      `json:"operator,omitempty"`
	Asked    time.Time `json:"asked"`
}

// Answers.
const (
	AnswerOnce    = "once"
	AnswerSession = "session"
	AnswerDeny    = "deny"
)

// AskTimeout is how long an interactive run waits for an answer before taking it as no.
var AskTimeout = 10 * time.Minute

// apiAsker puts questions in the run's record and waits for POST .../answer. It runs on
// the run's own goroutine, which owns the record.
type apiAsker struct {
	e   *Engine
	rec *Record
	ch  chan string
	// r is the run, for its events: a client watching the stream answers from there.
	r *run

	mu  sync.Mutex
	cur string // the pending question's id
	// curOperator: the pending question is ask_operator's, answered with text.
	curOperator bool
	n           int
	// spawning: seeds run before the run exists for anybody to answer; every question
	// then is a no, at once (rather than a wait nobody can end).
	spawning bool
}

func (a *apiAsker) Ask(ctx context.Context, q pipeline.Question) (bool, error) {
	ans, err := a.ask(ctx, q, askPermission)
	return ans == AnswerOnce || ans == AnswerSession, err
}

// AskGate gives the taint gate its three answers.
func (a *apiAsker) AskGate(ctx context.Context, q pipeline.Question) (taint.Answer, error) {
	ans, err := a.ask(ctx, q, askGate)
	switch ans {
	case AnswerOnce:
		return taint.AnswerOnce, err
	case AnswerSession:
		return taint.AnswerSession, err
	}
	return taint.AnswerDeny, err
}

// NoOperatorAnswer is what an empty answer to ask_operator (an empty line at lev run's
// terminal, an empty answer from lev answer) sends: the agent learns that the person
// chose not to answer, rather than waiting out AskTimeout.
const NoOperatorAnswer = "(the operator gave no answer)"

// MaxOperatorAnswer caps the text an operator answers ask_operator with.
const MaxOperatorAnswer = 16 << 10

// errNoOperatorAnswer: ask_operator's question timed out or the run stopped.
var errNoOperatorAnswer = errors.New("the operator gave no answer")

// AskOperator puts ask_operator's question to the operator like a permission prompt (an
// ask event, run.json's question) and returns their text. Only POST .../answer (lev run's
// terminal) answers it: the agent has no path to that API (its token is not in any tool's
// environment, and the socket is masked).
func (a *apiAsker) AskOperator(ctx context.Context, question string) (string, error) {
	args, _ := json.Marshal(map[string]string{"question": question})
	ans, err := a.ask(ctx, pipeline.Question{Tool: "ask_operator", Args: args, Reason: question}, askOperator)
	if err != nil {
		return "", err
	}
	if ans == "" {
		return "", fmt.Errorf("%w (no answer within %s, or nobody was there)", errNoOperatorAnswer, AskTimeout)
	}
	return ans, nil
}

// Kinds of question.
const (
	askPermission = iota
	askGate
	askOperator
)

func (a *apiAsker) ask(ctx context.Context, q pipeline.Question, kind int) (string, error) {
	gate, operator := kind == askGate, kind == askOperator
	// What "no" is: a refusal for a prompt, no text at all for the operator.
	no := AnswerDeny
	if operator {
		no = ""
	}
	a.mu.Lock()
	if a.spawning {
		a.mu.Unlock()
		return no, nil
	}
	a.n++
	qq := &Question{ID: fmt.Sprintf("q%d", a.n), Tool: q.Tool, Args: q.Args, Reason: q.Reason, Gate: gate, Operator: operator, Asked: time.Now().UTC()}
	a.cur, a.curOperator = qq.ID, operator
	a.mu.Unlock()
	a.rec.Question = qq
	defer func() {
		a.mu.Lock()
		a.cur, a.curOperator = "", false
		a.mu.Unlock()
		a.rec.Question = nil
		if err := a.e.Store.Save(a.rec); err != nil {
			a.e.logf("run %s: %v", a.rec.ID, err)
		}
	}()
	// Unrecorded, the question is invisible to whoever would answer it: a refusal.
	if err := a.e.Store.Save(a.rec); err != nil {
		return no, err
	}
	a.emit(events.Event{Type: events.Ask, Question: qq.ID, Tool: q.Tool, Args: events.CapAskArgs(q.Args), Message: q.Reason, GatePrompt: gate, Operator: operator})
	answered := func(ans, how string) {
		if operator && ans != "" {
			// The event shows the operator's answer as an event shows arguments: capped.
			ans = string(events.CapAskArgs(json.RawMessage(ans)))
		}
		a.emit(events.Event{Type: events.AnswerT, Question: qq.ID, Tool: q.Tool, Answer: ans, GatePrompt: gate, Operator: operator, Message: how})
	}
	select {
	case ans := <-a.ch:
		answered(ans, "answered")
		return ans, nil
	case <-ctx.Done():
		answered(no, "the run was stopped")
		return no, ctx.Err()
	case <-time.After(AskTimeout):
		answered(no, fmt.Sprintf("no answer within %s", AskTimeout))
		return no, nil
	}
}

func (a *apiAsker) emit(ev events.Event) {
	if a.r != nil {
		a.r.emit(a.e, ev)
	}
}

// Answer answers an interactive run's pending question: once, session or deny for a
// prompt; the operator's text for an ask_operator question.
func (e *Engine) Answer(id, question, answer string) error {
	var a *apiAsker
	e.mu.Lock()
	if l := e.runs[id]; l != nil {
		a = l.asker
	}
	e.mu.Unlock()
	operator := false
	if a != nil {
		a.mu.Lock()
		operator = a.cur != "" && a.cur == question && a.curOperator
		a.mu.Unlock()
	}
	if operator {
		if err := checkOperatorAnswer(answer); err != nil {
			return err
		}
	} else {
		switch answer {
		case AnswerOnce, AnswerSession, AnswerDeny:
		default:
			return fmt.Errorf("bad answer %q (want once, session or deny)", answer)
		}
	}
	if a == nil {
		return fmt.Errorf("run %s is not waiting for an answer", id)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == "" || a.cur != question || a.curOperator != operator {
		return fmt.Errorf("run %s has no pending question %q", id, question)
	}
	a.cur, a.curOperator = "", false
	a.ch <- answer
	return nil
}

// checkOperatorAnswer: the operator's text reaches the model as it is, so it must be
// text, not empty, and within MaxOperatorAnswer.
func checkOperatorAnswer(s string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return errors.New("bad answer: an ask_operator question is answered with text, and this is empty")
	case len(s) > MaxOperatorAnswer:
		return fmt.Errorf("bad answer: %d bytes, over the %d KiB cap for an operator's answer", len(s), MaxOperatorAnswer>>10)
	case !utf8.ValidString(s):
		return errors.New("bad answer: not UTF-8")
	}
	return nil
}
