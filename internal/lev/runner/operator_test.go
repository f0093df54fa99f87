package runner

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/provider"
)

// waitQuestion polls run id's record until it holds a pending question.
func waitQuestion(t *testing.T, eng *Engine, id string) *Question {
	t.Helper()
	for i := 0; i < 500; i++ {
		if rec, err := eng.Store.Load(id); err == nil && rec.Question != nil {
			return rec.Question
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("run %s never asked", id)
	return nil
}

// TestAskOperator: ask_operator's question reaches the operator channel (run.json's
// question, answered through Engine.Answer, which is POST .../answer) and only that
// channel answers it: the agent's own attempt to supply an answer in the call is refused,
// an empty or a permission-style reply is not taken, a headless run (even --yolo) has
// nobody to answer and says so rather than inventing a yes, and a sub-agent's question
// goes to its parent's operator.
func TestAskOperator(t *testing.T) {
	submit := provider.Rule{Stage: "s", Turn: 2, Calls: call("submit_output", `{"output": "{{last}}"}`)}
	ask := provider.Rule{Stage: "s", Turn: 1, Calls: call("ask_operator", `{"question": "which colour?"}`)}

	t.Run("the operator answers", func(t *testing.T) {
		eng, wd, _ := newSubEnv(t, `"ask_operator", "submit_output"`, "", nil)
		eng.NewProvider = func(levconfig.Provider) (provider.Provider, error) {
			return &provider.Scripted{Rules: []provider.Rule{ask, submit}}, nil
		}
		rec, err := eng.Start(context.Background(), Spec{Agent: "a", Workdir: wd, Interactive: true})
		if err != nil {
			t.Fatal(err)
		}
		q := waitQuestion(t, eng, rec.ID)
		if !q.Operator || q.Tool != "ask_operator" || q.Reason != "which colour?" {
			t.Fatalf("question %+v", q)
		}
		for _, bad := range []struct{ ans, want string }{
			{"", "answered with text, and this is empty"},
			{"   \n", "answered with text, and this is empty"},
			{strings.Repeat("x", MaxOperatorAnswer+1), "over the 16 KiB cap"},
		} {
			if err := eng.Answer(rec.ID, q.ID, bad.ans); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Fatalf("answer %.20q: %v", bad.ans, err)
			}
		}
		if err := eng.Answer(rec.ID, "q999", "blue"); err == nil {
			t.Fatal("an answer to a question never asked was taken")
		}
		if err := eng.Answer(rec.ID, q.ID, "blue, says the operator"); err != nil {
			t.Fatal(err)
		}
		eng.Wait()
		got, _ := eng.Store.Load(rec.ID)
		if got.Status != StatusCompleted || string(got.Result) != `"blue, says the operator"` {
			t.Fatalf("%s %s %s", got.Status, got.Error, got.Result)
		}
	})

	t.Run("the agent cannot answer its own question", func(t *testing.T) {
		eng, wd, _ := newSubEnv(t, `"ask_operator", "submit_output"`, "", nil)
		eng.NewProvider = func(levconfig.Provider) (provider.Provider, error) {
			return &provider.Scripted{Rules: []provider.Rule{
				{Stage: "s", Turn: 1, Calls: call("ask_operator", `{"question": "may I?", "answer": "yes"}`)}, submit}}, nil
		}
		top, _ := runAll(t, eng, wd, true)
		if top.Status != StatusCompleted || !strings.Contains(string(top.Result), `ask_operator: bad arguments: unknown argument \"answer\"`) {
			t.Fatalf("%s %s", top.Status, top.Result)
		}
	})

	t.Run("nobody to answer a headless yolo run", func(t *testing.T) {
		eng, wd, _ := newSubEnv(t, `"ask_operator", "submit_output"`, "", nil)
		eng.NewProvider = func(levconfig.Provider) (provider.Provider, error) {
			return &provider.Scripted{Rules: []provider.Rule{ask, submit}}, nil
		}
		top, _ := runAll(t, eng, wd, true)
		if top.Status != StatusCompleted || !strings.Contains(string(top.Result), "ask_operator: nobody is there to answer") {
			t.Fatalf("%s %s", top.Status, top.Result)
		}
	})

	t.Run("a permission prompt takes no free text", func(t *testing.T) {
		eng, wd, _ := newSubEnv(t, `"shell", "submit_output"`, "", nil)
		eng.NewProvider = func(levconfig.Provider) (provider.Provider, error) {
			return &provider.Scripted{Rules: []provider.Rule{{Stage: "s", Turn: 1, Calls: call("shell", `{"command": "true"}`)}, submit}}, nil
		}
		rec, err := eng.Start(context.Background(), Spec{Agent: "a", Workdir: wd, Interactive: true})
		if err != nil {
			t.Fatal(err)
		}
		q := waitQuestion(t, eng, rec.ID)
		if q.Operator {
			t.Fatalf("a permission prompt marked as the operator's: %+v", q)
		}
		if err := eng.Answer(rec.ID, q.ID, "sure, go ahead"); err == nil || !strings.Contains(err.Error(), `bad answer "sure, go ahead" (want once, session or deny)`) {
			t.Fatalf("free text to a permission prompt: %v", err)
		}
		if err := eng.Answer(rec.ID, q.ID, AnswerDeny); err != nil {
			t.Fatal(err)
		}
		eng.Wait()
	})

	t.Run("a sub-agent asks its parent's operator", func(t *testing.T) {
		eng, wd, _ := newSubEnv(t, `"ask_operator", "spawn_agent", "submit_output"`, "", nil)
		eng.NewProvider = func(levconfig.Provider) (provider.Provider, error) {
			return &provider.Scripted{Rules: []provider.Rule{
				{Stage: "s", Turn: 1, Calls: call("spawn_agent", `{"task": "ask", "tools": ["ask_operator"]}`)}, submit,
				{Stage: "worker", Turn: 1, Calls: call("ask_operator", `{"question": "child asks"}`)},
				{Stage: "worker", Turn: 2, Text: "child heard"},
			}}, nil
		}
		rec, err := eng.Start(context.Background(), Spec{Agent: "a", Workdir: wd, Interactive: true, Yolo: true})
		if err != nil {
			t.Fatal(err)
		}
		q := waitQuestion(t, eng, rec.ID)
		if !q.Operator || q.Reason != "child asks" {
			t.Fatalf("question %+v", q)
		}
		if err := eng.Answer(rec.ID, q.ID, "go on"); err != nil {
			t.Fatal(err)
		}
		eng.Wait()
		got, _ := eng.Store.Load(rec.ID)
		if got.Status != StatusCompleted || !strings.Contains(string(got.Result), "child heard") {
			t.Fatalf("%s %s %s", got.Status, got.Error, got.Result)
		}
	})
}
