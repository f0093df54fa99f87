package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/runner"
)

// runFiles is a Source over lev's run layout on disk (runner.Store's run.json and
// events.jsonl, one store per agent), written and read with lev's own store, event log
// and tail: the handler is exercised on the records a real lev writes. Jail and broker
// views are given. Answer does what lev's engine does with an answer: an answer event
// in the log, the question gone from run.json.
type runFiles struct {
	t      *testing.T
	root   string
	jail   Jail
	broker Broker

	mu      sync.Mutex
	logs    map[string]*events.Log
	answers []string // agent/run/question=answer, in order
}

func newRunFiles(t *testing.T) *runFiles {
	t.Helper()
	return &runFiles{t: t, root: t.TempDir(), logs: map[string]*events.Log{}}
}

func (f *runFiles) store(agent string) *runner.Store {
	return &runner.Store{Dir: filepath.Join(f.root, agent, "runs")}
}

// start records a new run of agent and opens its event log.
func (f *runFiles) start(agent, id, blueprint string) {
	f.t.Helper()
	st := f.store(agent)
	rec := &runner.Record{ID: id, Agent: blueprint, Blueprint: blueprint, Status: "running", Interactive: true, Created: time.Now().UTC()}
	if err := st.Save(rec); err != nil {
		f.t.Fatal(err)
	}
	l, err := events.Open(filepath.Join(st.RunDir(id), events.FileName), id)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { l.Close() })
	f.mu.Lock()
	f.logs[agent+"/"+id] = l
	f.mu.Unlock()
	f.emit(agent, id, events.Event{Type: events.RunStart, Agent: blueprint})
}

func (f *runFiles) emit(agent, id string, ev events.Event) {
	f.t.Helper()
	f.mu.Lock()
	l := f.logs[agent+"/"+id]
	f.mu.Unlock()
	if _, err := l.Emit(ev); err != nil {
		f.t.Fatal(err)
	}
}

// ask puts a pending question in the run's record and its ask event in the log, as lev's
// asker does.
func (f *runFiles) ask(agent, id string, q runner.Question) {
	f.t.Helper()
	st := f.store(agent)
	rec, err := st.Load(id)
	if err != nil {
		f.t.Fatal(err)
	}
	q.Asked = time.Now().UTC()
	rec.Question = &q
	if err := st.Save(rec); err != nil {
		f.t.Fatal(err)
	}
	f.emit(agent, id, events.Event{Type: events.Ask, Question: q.ID, Tool: q.Tool, Args: q.Args, Message: q.Reason, GatePrompt: q.Gate, Operator: q.Operator})
}

func (f *runFiles) answered() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.answers...)
}

func (f *runFiles) Jail(context.Context) (Jail, error)     { return f.jail, nil }
func (f *runFiles) Broker(context.Context) (Broker, error) { return f.broker, nil }

func (f *runFiles) agents() []string {
	ents, _ := os.ReadDir(f.root)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func (f *runFiles) Runs(context.Context) ([]Run, error) {
	var out []Run
	for _, a := range f.agents() {
		recs, err := f.store(a).List()
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			out = append(out, Run{Agent: a, ID: r.ID, Blueprint: r.Blueprint, Status: string(r.Status), Stage: fmt.Sprint(r.Stage), Created: r.Created})
		}
	}
	return out, nil
}

func (f *runFiles) Events(ctx context.Context, agent, id string, send func(events.Event) error) error {
	t, err := events.NewTail(filepath.Join(f.store(agent).RunDir(id), events.FileName))
	if err != nil {
		return err
	}
	defer t.Close()
	for {
		evs, err := t.Next(64)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if err := send(ev); err != nil {
				return err
			}
			if ev.Terminal() {
				return nil
			}
		}
		if len(evs) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func (f *runFiles) Prompts(context.Context) ([]Prompt, error) {
	var out []Prompt
	for _, a := range f.agents() {
		recs, err := f.store(a).List()
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			if q := r.Question; q != nil {
				out = append(out, Prompt{Agent: a, Run: r.ID, ID: q.ID, Tool: q.Tool, Args: string(q.Args), Reason: q.Reason, Gate: q.Gate, Operator: q.Operator, Asked: q.Asked})
			}
		}
	}
	return out, nil
}

func (f *runFiles) Answer(_ context.Context, p Prompt, answer string) error {
	st := f.store(p.Agent)
	rec, err := st.Load(p.Run)
	if err != nil {
		return err
	}
	if rec.Question == nil || rec.Question.ID != p.ID {
		return errors.New("no such pending question")
	}
	rec.Question = nil
	if err := st.Save(rec); err != nil {
		return err
	}
	f.emit(p.Agent, p.Run, events.Event{Type: events.AnswerT, Question: p.ID, Tool: p.Tool, Answer: answer, GatePrompt: p.Gate, Operator: p.Operator, Message: "answered"})
	f.mu.Lock()
	f.answers = append(f.answers, p.Agent+"/"+p.Run+"/"+p.ID+"="+answer)
	f.mu.Unlock()
	return nil
}

// hostile is what an agent could write into a tool result, an argument or a name to
// script the page.
var hostile = []string{
	`<script>window.__pwned=1</script>`,
	`<a href="javascript:window.__pwned=2">click</a>`,
	`<svg onload="window.__pwned=3"><script>window.__pwned=4</script></svg>`,
	`<img src=x onerror="window.__pwned=5">`,
	`"><script>window.__pwned=6</script>`,
}

func hostileJSON() json.RawMessage {
	b, _ := json.Marshal(map[string]any{"path": hostile[1], "content": hostile[2]})
	return b
}

// Run ids in lev's form (runner.Store refuses others).
const (
	rid1 = "r-20261205-090000-a1b2c3"
	rid2 = "r-20261205-090100-d4e5f6"
	rid3 = "r-20261205-090200-0a1b2c"
)
