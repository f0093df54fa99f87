package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// The engine's decisions, one at a time: when a stage ends (output submitted, a plain
// answer, the turn limit, a model error, a refusal a grant would lift, a gate that cannot
// record), what goes back to the model instead (a tool's error, a refusal, a blocked
// answer), what the next stage is handed, and what a run's end carries. The provider and
// the gate are the tests' own so that each decision is driven exactly; the pipeline,
// store and records are the real ones.

// turns is a provider that answers turn n of the run (over all stages) with turns[n-1];
// past the end it fails, as a model that stops answering would. Each request is kept.
type turns struct {
	mu    sync.Mutex
	resps []provider.Response
	reqs  []*provider.Request
}

func (p *turns) Complete(_ context.Context, req *provider.Request) (*provider.Response, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs = append(p.reqs, req)
	if len(p.reqs) > len(p.resps) {
		return nil, errors.New("turns: no more replies")
	}
	r := p.resps[len(p.reqs)-1]
	return &r, nil
}

// last is the last message of request n (1-based).
func (p *turns) last(n int) provider.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.reqs[n-1].Messages
	return m[len(m)-1]
}

func tcall(id, tool, args string) provider.ToolCall {
	return provider.ToolCall{ID: id, Name: tool, Args: json.RawMessage(args)}
}

func reply(calls ...provider.ToolCall) provider.Response { return provider.Response{ToolCalls: calls} }

// decideGate is a gate whose decision the test gives per call; fail makes its record
// fail (the taint state could not be written) once a call has been observed.
type decideGate struct {
	decide func(c *pipeline.Call) (pipeline.Decision, error)
	fail   error
	seen   bool
}

func (g *decideGate) Check(_ context.Context, c *pipeline.Call) (pipeline.Decision, error) {
	if g.decide == nil {
		return pipeline.Decision{Allow: true, Source: "test-allow-all"}, nil
	}
	return g.decide(c)
}

func (g *decideGate) Observe(context.Context, *pipeline.Call, *pipeline.Result) { g.seen = true }

func (g *decideGate) Err() error {
	if g.seen {
		return g.fail
	}
	return nil
}

const oneStage = "name = \"a\"\nversion = \"1\"\n[stages.s]\ntools = [\"list_dir\", \"read_file\", \"submit_output\"]\nmax_turns = 4\n"

// runWith starts agent a (blueprint bp) with the provider and gate, waits for the run and
// returns its record as run.json has it.
func runWith(t *testing.T, bp string, prov provider.Provider, g *decideGate, input string) (*Engine, *Record) {
	t.Helper()
	eng, wd := newEngine(t, bp, prov)
	if g != nil {
		eng.NewGate = func(*pipeline.RunEnv) (pipeline.Gate, error) { return g, nil }
	}
	must(t, os.WriteFile(filepath.Join(wd, "in.txt"), []byte("hello"), 0o644))
	rec, err := eng.Start(context.Background(), Spec{Agent: "a", Workdir: wd, Input: input})
	if err != nil {
		t.Fatal(err)
	}
	eng.Wait()
	rec, err = eng.Store.Load(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	return eng, rec
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// stageMessages is stage n's conversation as messages.json keeps it.
func stageMessages(t *testing.T, eng *Engine, id string, n int) []provider.Message {
	t.Helper()
	var ms []provider.Message
	must(t, readJSON(filepath.Join(eng.Store.StageDir(id, n), "messages.json"), &ms))
	return ms
}

// TestStageEnds: what ends a stage, and how each end shows in the run's record: its
// status, error or result, and how many turns and calls the stage took.
func TestStageEnds(t *testing.T) {
	cases := []struct {
		name      string
		bp        string
		resps     []provider.Response
		status    Status
		want      string // in the error, or the result
		turns     int
		toolCalls int
	}{
		{"submit_output ends the stage and the rest of its turn does not run", oneStage,
			[]provider.Response{reply(tcall("1", "submit_output", `{"output":"done"}`), tcall("2", "list_dir", `{}`))},
			StatusCompleted, `"done"`, 1, 1},
		{"a plain answer is the output", oneStage,
			[]provider.Response{reply(tcall("1", "list_dir", `{}`)), {Text: "the answer"}},
			StatusCompleted, `"the answer"`, 2, 1},
		{"max_turns turns without output fail the stage", oneStage,
			[]provider.Response{reply(tcall("1", "list_dir", `{}`)), reply(tcall("2", "list_dir", `{}`)),
				reply(tcall("3", "list_dir", `{}`)), reply(tcall("4", "list_dir", `{}`)), {Text: "too late"}},
			StatusFailed, "stage s: no output after 4 turns", 4, 4},
		{"one turn allowed: the answer in it counts", strings.Replace(oneStage, "max_turns = 4", "max_turns = 1", 1),
			[]provider.Response{{Text: "at once"}}, StatusCompleted, `"at once"`, 1, 0},
		{"a model error fails the stage, the turn counted", oneStage,
			nil, StatusFailed, "stage s: model: turns: no more replies", 1, 0},
		{"submit_output with an output that is not JSON is refused and the stage goes on", oneStage,
			[]provider.Response{reply(tcall("1", "submit_output", `{"output":`)), reply(tcall("2", "submit_output", `{"output":"fixed"}`))},
			StatusCompleted, `"fixed"`, 2, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, rec := runWith(t, tc.bp, &turns{resps: tc.resps}, nil, "")
			got := rec.Error + string(rec.Result)
			if rec.Status != tc.status || !strings.Contains(got, tc.want) {
				t.Fatalf("status %s, %q; want %s, %q", rec.Status, got, tc.status, tc.want)
			}
			st := rec.Stages[0]
			if st.Status != tc.status || st.Turns != tc.turns || st.ToolCalls != tc.toolCalls {
				t.Errorf("stage: %s, %d turns, %d calls; want %s, %d, %d", st.Status, st.Turns, st.ToolCalls, tc.status, tc.turns, tc.toolCalls)
			}
			if tc.status == StatusCompleted && string(st.Output) != string(rec.Result) {
				t.Errorf("the last stage's output %s is not the run's result %s", st.Output, rec.Result)
			}
		})
	}
}

// TestWhatGoesBackToTheModel: a failing call does not end the stage; the model gets a
// message saying what happened (marked as an error where it is one) and the next turn.
func TestWhatGoesBackToTheModel(t *testing.T) {
	cases := []struct {
		name    string
		call    provider.ToolCall
		gate    func(c *pipeline.Call) (pipeline.Decision, error)
		want    string // in the message the model gets next
		isError bool
	}{
		{"a tool's error", tcall("1", "read_file", `{"path":"missing.txt"}`), nil, "missing.txt", true},
		{"bad arguments", tcall("1", "read_file", `{"path":"in.txt","mode":"x"}`), nil, "read_file: bad arguments", true},
		{"arguments that are not JSON", tcall("1", "read_file", `{"path":`), nil, "read_file: bad arguments", true},
		{"a tool the stage does not offer", tcall("1", "shell", `{"command":"id"}`), nil, `tool "shell" is not offered in stage "s"`, true},
		{"the gate blocks the call", tcall("1", "read_file", `{"path":"in.txt"}`),
			func(c *pipeline.Call) (pipeline.Decision, error) {
				return pipeline.Decision{Allow: false, Reason: "test says no", Source: string(taint.SourceAutoBlock)}, nil
			}, "read_file: blocked by the taint gate: test says no", true},
		{"the gate fails: the call is blocked, not run", tcall("1", "read_file", `{"path":"in.txt"}`),
			func(c *pipeline.Call) (pipeline.Decision, error) {
				return pipeline.Decision{}, errors.New("gate broke")
			},
			"read_file: blocked by the taint gate: gate broke", true},
		{"control: a call that runs", tcall("1", "read_file", `{"path":"in.txt"}`), nil, "hello", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := &decideGate{}
			if tc.gate != nil {
				g.decide = func(c *pipeline.Call) (pipeline.Decision, error) {
					if c.Tool == "submit_output" {
						return pipeline.Decision{Allow: true, Source: "test"}, nil
					}
					return tc.gate(c)
				}
			}
			prov := &turns{resps: []provider.Response{reply(tc.call), reply(tcall("2", "submit_output", `{"output":"ok"}`))}}
			eng, rec := runWith(t, oneStage, prov, g, "")
			if rec.Status != StatusCompleted {
				t.Fatalf("the run ended %s (%s); a failing call must not end it", rec.Status, rec.Error)
			}
			got := prov.last(2)
			if got.Role != "tool" || got.ToolCallID != tc.call.ID || !strings.Contains(got.Content, tc.want) || got.IsError != tc.isError {
				t.Fatalf("the model got %+v; want a tool message for %s holding %q, error %v", got, tc.call.ID, tc.want, tc.isError)
			}
			// The conversation on disk holds the call as the model made it: arguments that
			// were not JSON are kept as a JSON string of their text.
			ms := stageMessages(t, eng, rec.ID, 0)
			if len(ms) < 2 || len(ms[1].ToolCalls) != 1 || !json.Valid(ms[1].ToolCalls[0].Args) {
				t.Fatalf("messages.json: %+v", ms)
			}
		})
	}
}

// TestBlockedAnswerGoesBack: a plain answer is gated as the submit_output it stands for;
// blocked, the model is told so and gets another turn, and the answer is not the output.
func TestBlockedAnswerGoesBack(t *testing.T) {
	g := &decideGate{decide: func(c *pipeline.Call) (pipeline.Decision, error) {
		if c.ID == "answer-1" {
			return pipeline.Decision{Allow: false, Reason: "the answer carries a secret", Source: string(taint.SourceAutoBlock)}, nil
		}
		return pipeline.Decision{Allow: true, Source: "test"}, nil
	}}
	prov := &turns{resps: []provider.Response{{Text: "the secret"}, {Text: "a clean answer"}}}
	eng, rec := runWith(t, oneStage, prov, g, "")
	if rec.Status != StatusCompleted || string(rec.Result) != `"a clean answer"` {
		t.Fatalf("%s %s %s", rec.Status, rec.Error, rec.Result)
	}
	got := prov.last(2)
	if got.Role != "user" || !strings.Contains(got.Content, "your final answer leaves the machine like submit_output and was blocked by the taint gate: the answer carries a secret") {
		t.Fatalf("the model got %+v", got)
	}
	data, err := os.ReadFile(filepath.Join(eng.Store.StageDir(rec.ID, 0), "tool_calls.jsonl"))
	if err != nil || !strings.Contains(string(data), `"answer-1"`) {
		t.Fatalf("the blocked answer is not in tool_calls.jsonl (%v): %s", err, data)
	}
}

// TestStagesInOrder: each stage starts from its prompt and the previous stage's output
// (the first from the task), and the run's result is the last stage's output.
func TestStagesInOrder(t *testing.T) {
	bp := "name = \"a\"\nversion = \"1\"\n" +
		"[stages.first]\nprompt = \"P1\"\ntools = [\"submit_output\"]\n" +
		"[stages.second]\nprompt = \"P2\"\ntools = [\"submit_output\"]\n"
	prov := &turns{resps: []provider.Response{
		reply(tcall("1", "submit_output", `{"output":{"n":1}}`)),
		reply(tcall("2", "submit_output", `{"output":"two"}`)),
	}}
	eng, rec := runWith(t, bp, prov, nil, "the task")
	if rec.Status != StatusCompleted || string(rec.Result) != `"two"` {
		t.Fatalf("%s %s %s", rec.Status, rec.Error, rec.Result)
	}
	if got := prov.reqs[0].Messages[0].Content; got != "P1\n\nTask:\nthe task" {
		t.Errorf("stage 1 starts with %q", got)
	}
	if got := prov.reqs[1].Messages[0].Content; got != "P2\n\nOutput of the previous stage:\n{\"n\":1}" {
		t.Errorf("stage 2 starts with %q", got)
	}
	if len(prov.reqs[1].Messages) != 1 || prov.reqs[1].Stage != "second" {
		t.Errorf("stage 2's first request carries stage 1's conversation: %+v", prov.reqs[1])
	}
	for i, want := range []string{`{"n":1}`, `"two"`} {
		var out bytes.Buffer
		st := rec.Stages[i]
		if err := json.Compact(&out, st.Output); err != nil || st.Status != StatusCompleted || out.String() != want {
			t.Errorf("stage %d: %s %s, want completed %s", i, st.Status, st.Output, want)
		}
	}
	if n := len(stageMessages(t, eng, rec.ID, 1)); n != 3 {
		t.Errorf("stage 2's messages.json holds %d messages, want 3 (input, call, result)", n)
	}
}

// TestFailedStageStopsTheRun: a stage that fails ends the run there; later stages stay
// pending and never reach the model.
func TestFailedStageStopsTheRun(t *testing.T) {
	bp := "name = \"a\"\nversion = \"1\"\n" +
		"[stages.first]\ntools = [\"list_dir\"]\nmax_turns = 1\n" +
		"[stages.second]\ntools = [\"submit_output\"]\n"
	prov := &turns{resps: []provider.Response{reply(tcall("1", "list_dir", `{}`)), {Text: "never asked"}}}
	_, rec := runWith(t, bp, prov, nil, "")
	if rec.Status != StatusFailed || rec.Stage != 0 || !strings.Contains(rec.Error, "stage first: no output after 1 turns") {
		t.Fatalf("%s stage %d: %s", rec.Status, rec.Stage, rec.Error)
	}
	if rec.Stages[1].Status != StatusPending || len(prov.reqs) != 1 {
		t.Fatalf("stage 2 is %s after %d model calls", rec.Stages[1].Status, len(prov.reqs))
	}
}

// TestNotGrantedStopsAndResumes: a read refused because the config does not grant the
// blueprint's [read_paths] entry stops the run refused, with that call and the rest of its
// turn pending; lev resume runs them first, under the config in force then.
func TestNotGrantedStopsAndResumes(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(secret, []byte("s3"), 0o644))
	bp := oneStage + "[read_paths]\nallow = [\"" + secret + "\"]\n"
	prov := &turns{resps: []provider.Response{
		reply(tcall("1", "read_file", `{"path":"`+secret+`"}`), tcall("2", "submit_output", `{"output":"never"}`)),
		{Text: "after resume"},
	}}
	eng, rec := runWith(t, bp, prov, nil, "")
	if rec.Status != StatusRefused || rec.Refusal == nil || rec.Refusal.Code != workfs.CodeNotGranted {
		t.Fatalf("%s %+v %s", rec.Status, rec.Refusal, rec.Error)
	}
	if !strings.Contains(rec.Error, "(then: lev resume "+rec.ID+")") {
		t.Errorf("the error does not say how to go on: %s", rec.Error)
	}
	pend := rec.Stages[0].Pending
	if len(pend) != 2 || pend[0].ID != "1" || pend[1].ID != "2" || rec.Stages[0].ToolCalls != 1 {
		t.Fatalf("pending %+v after %d calls; want calls 1 and 2 waiting", pend, rec.Stages[0].ToolCalls)
	}
	// Resumed under the same config, the pending read is refused again, before any model
	// turn: the run stops where it stood.
	if _, err := eng.Resume(context.Background(), rec.ID, false); err != nil {
		t.Fatal(err)
	}
	eng.Wait()
	rec, _ = eng.Store.Load(rec.ID)
	if rec.Status != StatusRefused || len(prov.reqs) != 1 || len(rec.Stages[0].Pending) != 2 {
		t.Fatalf("after resume: %s, %d model calls, pending %+v", rec.Status, len(prov.reqs), rec.Stages[0].Pending)
	}
}

// TestGateRecordFailureStopsTheRun: when the gate cannot record the run's taint (it would
// be lost on resume), the run stops after the call, with the gate's error.
func TestGateRecordFailureStopsTheRun(t *testing.T) {
	g := &decideGate{fail: errors.New("recording taint_state.json: disk full")}
	prov := &turns{resps: []provider.Response{reply(tcall("1", "list_dir", `{}`), tcall("2", "list_dir", `{}`)), {Text: "never"}}}
	_, rec := runWith(t, oneStage, prov, g, "")
	if rec.Status != StatusFailed || !strings.Contains(rec.Error, "disk full") || rec.Stages[0].ToolCalls != 1 || len(prov.reqs) != 1 {
		t.Fatalf("%s %q, %d calls, %d model calls", rec.Status, rec.Error, rec.Stages[0].ToolCalls, len(prov.reqs))
	}
}

// TestRunErrorIsGated: the text a run ends with is output too; blocked by the gate, the
// run's error says it was withheld and where it is, and never carries it.
func TestRunErrorIsGated(t *testing.T) {
	for _, block := range []bool{true, false} {
		g := &decideGate{decide: func(c *pipeline.Call) (pipeline.Decision, error) {
			if block && strings.HasPrefix(c.ID, "run-error-") {
				return pipeline.Decision{Allow: false, Reason: "private", Source: string(taint.SourceAutoBlock)}, nil
			}
			return pipeline.Decision{Allow: true, Source: "test"}, nil
		}}
		prov := &turns{resps: []provider.Response{reply(tcall("1", "read_file", `{"path":"secret-name.txt"}`))}}
		eng, rec := runWith(t, strings.Replace(oneStage, "max_turns = 4", "max_turns = 1", 1), prov, g, "")
		if rec.Status != StatusFailed {
			t.Fatalf("block=%v: %s", block, rec.Status)
		}
		kept, err := os.ReadFile(filepath.Join(eng.Store.RunDir(rec.ID), errorFile))
		switch {
		case block && (strings.Contains(rec.Error, "no output after") || !strings.Contains(rec.Error, "its message is withheld") ||
			err != nil || !strings.Contains(string(kept), "stage s: no output after 1 turns")):
			t.Errorf("blocked: error %q, %s holds %q (%v)", rec.Error, errorFile, kept, err)
		case !block && (rec.Error != "stage s: no output after 1 turns" || err == nil):
			t.Errorf("control: error %q, %s exists: %v", rec.Error, errorFile, err == nil)
		}
	}
}

// TestResumeRefusesAChangedBlueprint: a run whose blueprint now has another number of
// stages cannot be resumed: its record and the blueprint no longer line up.
func TestResumeRefusesAChangedBlueprint(t *testing.T) {
	prov := &turns{resps: []provider.Response{reply(tcall("1", "list_dir", `{}`))}}
	eng, rec := runWith(t, strings.Replace(oneStage, "max_turns = 4", "max_turns = 1", 1), prov, nil, "")
	if rec.Status != StatusFailed {
		t.Fatalf("%s", rec.Status)
	}
	// The run was admitted under its blueprint's snapshot; a resume that finds the stage
	// count changed in the record itself stops before any model call.
	rec.Stages = append(rec.Stages, StageRecord{Name: "extra", Status: StatusPending})
	must(t, eng.Store.Save(rec))
	if _, err := eng.Resume(context.Background(), rec.ID, false); err != nil {
		t.Fatalf("resume: %v", err)
	}
	eng.Wait()
	rec, _ = eng.Store.Load(rec.ID)
	if rec.Status != StatusFailed || !strings.Contains(rec.Error, "now has 1 stages, the run has 2; cannot resume") || len(prov.reqs) != 1 {
		t.Fatalf("%s %q after %d model calls", rec.Status, rec.Error, len(prov.reqs))
	}
}

// TestFirstMessage: what a stage's conversation starts with.
func TestFirstMessage(t *testing.T) {
	r := &run{rec: &Record{Input: "do it"}, seeds: "\n\nSeed:\nx"}
	cases := []struct {
		name string
		r    *run
		i    int
		prev json.RawMessage
		want string
	}{
		{"first stage: prompt, task, seeds", r, 0, nil, "P\n\nTask:\ndo it\n\nSeed:\nx"},
		{"first stage without a task", &run{rec: &Record{}}, 0, nil, "P"},
		{"a later stage: the previous output, not the task", r, 1, json.RawMessage(`"out"`), "P\n\nOutput of the previous stage:\n\"out\""},
		{"a later stage after no output", r, 1, nil, "P"},
	}
	for _, tc := range cases {
		if got := tc.r.firstMessage(tc.i, &blueprint.Stage{Prompt: "P"}, tc.prev); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestEventCaps: a run's result event carries the output up to MaxEventOutput and past it
// only its size; a failing call's event carries its message up to events.MaxArgs.
func TestEventCaps(t *testing.T) {
	for _, n := range []int{MaxEventOutput - 2, MaxEventOutput - 1, MaxEventOutput + 8} {
		out, _ := json.Marshal(strings.Repeat("x", n))
		ev := resultOutputEvent(out)
		whole := len(out) <= MaxEventOutput
		if ev.Bytes != len(out) || (ev.Output != nil) != whole || (ev.Message != "") == whole {
			t.Errorf("%d bytes: output %d bytes, message %q", len(out), len(ev.Output), ev.Message)
		}
	}
	c := &pipeline.Call{ID: "c", Tool: "read_file", Stage: pipeline.Stage{Name: "s"}}
	long := strings.Repeat("e", events.MaxArgs+100)
	ev := resultEvent(c, &pipeline.Result{Content: long, IsError: true})
	if ev.Status != events.StatusError || ev.Bytes != len(long) || ev.Message != long[:events.MaxArgs]+"…" {
		t.Errorf("error event: %s, %d bytes, message %d bytes", ev.Status, ev.Bytes, len(ev.Message))
	}
	ev = resultEvent(c, &pipeline.Result{Content: "no", IsError: true, Refusal: &pipeline.Refusal{Step: pipeline.StepFence}})
	if ev.Status != events.StatusRefused || ev.Step != pipeline.StepFence {
		t.Errorf("refusal event: %+v", ev)
	}
	if ev := resultEvent(c, &pipeline.Result{Content: "fine"}); ev.Status != events.StatusOK || ev.Message != "" {
		t.Errorf("ok event: %+v", ev)
	}
}

// TestCallEventDecision: how a call's event names the pipeline's decision.
func TestCallEventDecision(t *testing.T) {
	st := pipeline.Stage{Name: "s"}
	cases := []struct {
		name string
		c    *pipeline.Call
		res  *pipeline.Result
		want events.Decision
		step string
	}{
		{"allowed", &pipeline.Call{Stage: st, Permission: "allow"}, nil, events.Allowed, ""},
		{"asked: permission ask, a person said yes", &pipeline.Call{Stage: st, Permission: "ask"}, nil, events.Asked, ""},
		{"gated: the gate asked a person", &pipeline.Call{Stage: st, Permission: "allow", Gate: &pipeline.Decision{Allow: true, Source: string(taint.SourceUserOnce)}}, nil, events.Gated, ""},
		{"a session answer counts as gated", &pipeline.Call{Stage: st, Permission: "ask", Gate: &pipeline.Decision{Allow: true, Source: string(taint.SourceSessionAllow)}}, nil, events.Gated, ""},
		{"a quiet gate pass is not gated", &pipeline.Call{Stage: st, Permission: "allow", Gate: &pipeline.Decision{Allow: true, Source: string(taint.SourceWithinClearance)}}, nil, events.Allowed, ""},
		{"refused at a step", &pipeline.Call{Stage: st}, &pipeline.Result{Refusal: &pipeline.Refusal{Step: pipeline.StepPermission, Msg: "no"}}, events.Refused, pipeline.StepPermission},
		{"an error before running is a fence refusal", &pipeline.Call{Stage: st}, &pipeline.Result{Content: "missing", IsError: true}, events.Refused, pipeline.StepFence},
	}
	for _, tc := range cases {
		ev := callEvent(tc.c, tc.res)
		if ev.Decision != tc.want || ev.Step != tc.step {
			t.Errorf("%s: %s at %q, want %s at %q", tc.name, ev.Decision, ev.Step, tc.want, tc.step)
		}
	}
}

// TestRecordArgs: tool_calls.jsonl keeps arguments whole up to MaxRecordArgs, and past it
// a head cut at a character's start with the whole's size and hash.
func TestRecordArgs(t *testing.T) {
	at := json.RawMessage(`"` + strings.Repeat("a", MaxRecordArgs-2) + `"`)
	if got := RecordArgs(at); string(got) != string(at) {
		t.Errorf("args at the cap were changed")
	}
	over := json.RawMessage(`"` + strings.Repeat("a", MaxRecordArgs-2) + "é\"")
	var tr truncatedArgs
	must(t, json.Unmarshal(RecordArgs(over), &tr))
	if tr.Bytes != len(over) || tr.TruncatedAt != MaxRecordArgs || len(tr.SHA256) != 64 || strings.ContainsRune(tr.Head, '\uFFFD') || len(tr.Head) != MaxRecordArgs-1 {
		t.Errorf("truncated: %d bytes at %d, head %d bytes", tr.Bytes, tr.TruncatedAt, len(tr.Head))
	}
}
