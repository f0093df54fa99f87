package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

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
	Asked  time.Time       `json:"asked"`
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
	n   int
	// spawning: seeds run before the run exists for anybody to answer; every question
	// then is a no, at once (rather than a wait nobody can end).
	spawning bool
}

func (a *apiAsker) Ask(ctx context.Context, q pipeline.Question) (bool, error) {
	ans, err := a.ask(ctx, q, false)
	return ans == AnswerOnce || ans == AnswerSession, err
}

// AskGate gives the taint gate its three answers.
func (a *apiAsker) AskGate(ctx context.Context, q pipeline.Question) (taint.Answer, error) {
	ans, err := a.ask(ctx, q, true)
	switch ans {
	case AnswerOnce:
		return taint.AnswerOnce, err
	case AnswerSession:
		return taint.AnswerSession, err
	}
	return taint.AnswerDeny, err
}

func (a *apiAsker) ask(ctx context.Context, q pipeline.Question, gate bool) (string, error) {
	a.mu.Lock()
	if a.spawning {
		a.mu.Unlock()
		return AnswerDeny, nil
	}
	a.n++
	qq := &Question{ID: fmt.Sprintf("q%d", a.n), Tool: q.Tool, Args: q.Args, Reason: q.Reason, Gate: gate, Asked: time.Now().UTC()}
	a.cur = qq.ID
	a.mu.Unlock()
	a.rec.Question = qq
	defer func() {
		a.mu.Lock()
		a.cur = ""
		a.mu.Unlock()
		a.rec.Question = nil
		if err := a.e.Store.Save(a.rec); err != nil {
			a.e.logf("run %s: %v", a.rec.ID, err)
		}
	}()
	// Unrecorded, the question is invisible to whoever would answer it: a refusal.
	if err := a.e.Store.Save(a.rec); err != nil {
		return AnswerDeny, err
	}
	a.emit(events.Event{Type: events.Ask, Question: qq.ID, Tool: q.Tool, Args: events.CapAskArgs(q.Args), Message: q.Reason, GatePrompt: gate})
	answered := func(ans, how string) {
		a.emit(events.Event{Type: events.AnswerT, Question: qq.ID, Tool: q.Tool, Answer: ans, GatePrompt: gate, Message: how})
	}
	select {
	case ans := <-a.ch:
		answered(ans, "answered")
		return ans, nil
	case <-ctx.Done():
		answered(AnswerDeny, "the run was stopped")
		return AnswerDeny, ctx.Err()
	case <-time.After(AskTimeout):
		answered(AnswerDeny, fmt.Sprintf("no answer within %s", AskTimeout))
		return AnswerDeny, nil
	}
}

func (a *apiAsker) emit(ev events.Event) {
	if a.r != nil {
		a.r.emit(a.e, ev)
	}
}

// Answer answers an interactive run's pending question.
func (e *Engine) Answer(id, question, answer string) error {
	switch answer {
	case AnswerOnce, AnswerSession, AnswerDeny:
	default:
		return fmt.Errorf("bad answer %q (want once, session or deny)", answer)
	}
	var a *apiAsker
	e.mu.Lock()
	if l := e.runs[id]; l != nil {
		a = l.asker
	}
	e.mu.Unlock()
	if a == nil {
		return fmt.Errorf("run %s is not waiting for an answer", id)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cur == "" || a.cur != question {
		return fmt.Errorf("run %s has no pending question %q", id, question)
	}
	a.cur = ""
	a.ch <- answer
	return nil
}
