package runner

// Driving a run: its stages in order, each a loop of model turns and the tool calls they
// ask for, every call through the pipeline; a stage ends in output, a refusal or a failure.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/provider"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// stageState is stage.json plus the conversation.
type stageState struct {
	rec      *StageRecord
	dir      string
	messages []provider.Message
}

func (e *Engine) drive(ctx context.Context, r *run) {
	rec := r.rec
	// The text a run ends with is output (gateError); decided once, for both the
	// stage_end event and the run's record.
	var gatedIn, gatedOut string
	var gatedRef *pipeline.Refusal
	gate := func(msg string, ref *pipeline.Refusal) (string, *pipeline.Refusal) {
		switch {
		case msg == "":
			return msg, ref
		case gatedOut != "" && msg == gatedOut:
			return msg, ref // already decided (the stage's end, now the run's)
		case msg != gatedIn:
			gatedIn = msg
			gatedOut, gatedRef = e.gateError(ctx, r, msg, ref)
		}
		return gatedOut, gatedRef
	}
	fail := func(status Status, msg string, ref *pipeline.Refusal) {
		if err := r.evErr(); err != nil && !strings.Contains(msg, err.Error()) {
			msg += "; " + err.Error()
		}
		msg, ref = gate(msg, ref)
		rec.Status, rec.Error, rec.Refusal = status, msg, ref
		end := events.Event{Type: events.RunEnd, Status: events.Status(status), Error: msg}
		if ref != nil {
			end.Step = ref.Step
		}
		defer r.emit(e, end)
		if err := e.labelRun(r); err != nil {
			// The record is still written: unlabelled, a run's records read as Private.
			rec.Error = msg + "; " + err.Error()
		}
		if e.saveEnd(rec) == nil {
			e.logf("run %s: %s: %s", rec.ID, status, msg)
		}
	}
	if len(rec.Stages) != len(r.bp.Order) {
		fail(StatusFailed, fmt.Sprintf("blueprint %s now has %d stages, the run has %d; cannot resume", r.bp.Name, len(r.bp.Order), len(rec.Stages)), nil)
		return
	}
	var prev json.RawMessage
	for i := range rec.Stages {
		sr := &rec.Stages[i]
		if sr.Status == StatusCompleted {
			prev = sr.Output
			continue
		}
		rec.Stage = i
		st := r.bp.Order[i]
		ss := &stageState{rec: sr, dir: e.Store.StageDir(rec.ID, i)}
		if err := os.MkdirAll(ss.dir, 0o700); err != nil {
			fail(StatusFailed, err.Error(), nil)
			return
		}
		if sr.Status == StatusPending {
			ss.messages = []provider.Message{{Role: "user", Content: r.firstMessage(i, st, prev)}}
		} else if err := readJSON(filepath.Join(ss.dir, "messages.json"), &ss.messages); err != nil {
			fail(StatusFailed, fmt.Sprintf("stage %s: reading its conversation: %v", st.Name, err), nil)
			return
		}
		sr.Status = StatusRunning
		r.emit(e, events.Event{Type: events.StageStart, Stage: st.Name, StageIndex: intp(i), Turn: sr.Turns})
		if err := e.labelRun(r); err != nil {
			fail(StatusFailed, err.Error(), nil)
			return
		}
		if err := e.Store.Save(rec); err != nil {
			fail(StatusFailed, err.Error(), nil)
			return
		}
		status, msg, ref := e.stage(ctx, r, i, st, ss)
		sr.Status = status
		// A stage's record is complete whatever ended it; a write that fails fails the run,
		// and its error (naming the file) is added to whatever ended the stage.
		if err := e.saveStage(r, ss); err != nil {
			if status == StatusFailed {
				msg += "; then " + err.Error()
			} else {
				msg = err.Error()
			}
			status, ref = StatusFailed, nil
			sr.Status = status
		}
		msg, ref = gate(msg, ref)
		r.emit(e, events.Event{Type: events.StageEnd, Stage: st.Name, StageIndex: intp(i), Status: events.Status(status), Turn: sr.Turns, Error: msg})
		if status != StatusCompleted {
			fail(status, msg, ref)
			return
		}
		prev = sr.Output
	}
	rec.Status = StatusCompleted
	rec.Result = prev
	rec.Stage = len(rec.Stages) - 1
	if err := e.labelRun(r); err != nil {
		fail(StatusFailed, err.Error(), nil)
		return
	}
	if err := writeJSON(filepath.Join(e.Store.RunDir(rec.ID), "result.json"), map[string]any{"id": rec.ID, "agent": rec.Agent, "output": prev}); err != nil {
		rec.Result = nil
		fail(StatusFailed, err.Error(), nil)
		return
	}
	if err := r.evErr(); err != nil {
		rec.Result = nil
		fail(StatusFailed, err.Error(), nil)
		return
	}
	if err := e.Store.Save(rec); err != nil {
		// The output is in result.json, but run.json still says "running": the run
		// failed to finish, and Load says so, with the cause.
		rec.Status, rec.Error, rec.Result = StatusFailed, "completed, but its record could not be written", nil
		e.saveEnd(rec)
		r.emit(e, events.Event{Type: events.RunEnd, Status: events.Status(StatusFailed), Error: rec.Error + ": " + err.Error()})
		return
	}
	r.emit(e, resultOutputEvent(prev))
	r.emit(e, events.Event{Type: events.RunEnd, Status: events.Status(StatusCompleted), Bytes: len(prev)})
	e.logf("run %s: completed", rec.ID)
}

func (r *run) firstMessage(i int, st *blueprint.Stage, prev json.RawMessage) string {
	var b strings.Builder
	b.WriteString(st.Prompt)
	if i == 0 {
		if r.rec.Input != "" {
			b.WriteString("\n\nTask:\n" + r.rec.Input)
		}
		b.WriteString(r.seeds)
	} else if prev != nil {
		b.WriteString("\n\nOutput of the previous stage:\n" + string(prev))
	}
	return b.String()
}

// stage drives one stage: model turn, tool calls, until submit_output, a plain answer, or
// the turn limit.
func (e *Engine) stage(ctx context.Context, r *run, i int, st *blueprint.Stage, ss *stageState) (Status, string, *pipeline.Refusal) {
	pst := pipeline.Stage{Index: i, Name: st.Name, Dir: ss.dir, Tools: st.Tools, Sandbox: mergeSandbox(r.bp.Sandbox, st.Sandbox)}
	if r.conv != nil {
		r.conv.enter(i, ss, func() error { return e.saveStage(r, ss) })
	}
	// Calls left over from a refused turn run first, under the config in force now. The
	// caller writes stage.json and messages.json when the stage ends, however it ends.
	if pending := ss.rec.Pending; len(pending) > 0 {
		ss.rec.Pending = nil
		if status, msg, ref, done := e.calls(ctx, r, pst, ss, pending); done {
			return status, msg, ref
		}
	}
	for ss.rec.Turns < st.MaxTurns {
		if err := ctx.Err(); err != nil {
			return StatusFailed, "cancelled", nil
		}
		resp, err := r.prov.Complete(ctx, &provider.Request{Model: r.model, System: r.bp.SystemPrompt, Messages: ss.messages,
			Tools: r.pipe.Specs(pst), MaxTokens: r.cfg.Provider.MaxTokens, Stage: st.Name})
		ss.rec.Turns++
		if err != nil {
			r.addUsage(provider.Usage{})
			return StatusFailed, fmt.Sprintf("stage %s: model: %v", st.Name, err), nil
		}
		r.addUsage(resp.Usage)
		r.emit(e, events.Event{Type: events.Turn, Stage: st.Name, StageIndex: intp(i), Turn: ss.rec.Turns, Calls: len(resp.ToolCalls), Bytes: len(resp.Text)})
		resp.ToolCalls = recordableCalls(resp.ToolCalls)
		ss.messages = append(ss.messages, provider.Message{Role: "assistant", Content: resp.Text, ToolCalls: resp.ToolCalls})
		if r.conv != nil {
			r.conv.observeTurn()
		}
		if len(resp.ToolCalls) == 0 {
			ref, err := e.gateAnswer(ctx, r, pst, ss, resp.Text)
			if err != nil {
				return StatusFailed, err.Error(), nil
			}
			if ref != nil {
				ss.messages = append(ss.messages, provider.Message{Role: "user", Content: ref.Msg})
				if err := e.saveStage(r, ss); err != nil {
					return StatusFailed, err.Error(), nil
				}
				continue
			}
			out, _ := json.Marshal(resp.Text)
			ss.rec.Output = out
			return "completed", "", nil
		}
		status, msg, ref, done := e.calls(ctx, r, pst, ss, resp.ToolCalls)
		r.addUsage(provider.Usage{}) // web_search's, if the turn searched
		if done {
			return status, msg, ref
		}
		if err := e.saveStage(r, ss); err != nil {
			return StatusFailed, err.Error(), nil
		}
	}
	return StatusFailed, fmt.Sprintf("stage %s: no output after %d turns", st.Name, st.MaxTurns), nil
}

// calls runs a turn's tool calls in order. done is set when the stage ends: output
// submitted, or a refusal a grant would lift (the rest wait in Pending for lev resume).
func (e *Engine) calls(ctx context.Context, r *run, pst pipeline.Stage, ss *stageState, calls []provider.ToolCall) (status Status, msg string, ref *pipeline.Refusal, done bool) {
	for k, tc := range calls {
		c, res := r.pipe.Handle(ctx, pst, tc)
		ss.rec.ToolCalls++
		r.emit(e, resultEvent(c, res))
		if err := e.record(r, ss, c, res); err != nil {
			// The call ran but its trail is lost: stop here rather than go on unrecorded.
			return StatusFailed, err.Error(), nil, true
		}
		if err := gateErr(r.pipe.Gate); err != nil {
			return StatusFailed, err.Error(), nil, true
		}
		if err := r.evErr(); err != nil {
			return StatusFailed, err.Error(), nil, true
		}
		if res.Refusal != nil && res.Refusal.Code == workfs.CodeNotGranted {
			ss.rec.Pending = append([]provider.ToolCall(nil), calls[k:]...)
			return StatusRefused, res.Refusal.Msg + " (then: lev resume " + r.rec.ID + ")", res.Refusal, true
		}
		ss.messages = append(ss.messages, provider.Message{Role: "tool", ToolCallID: tc.ID, Name: tc.Name, Content: res.Content, IsError: res.IsError})
		if tc.Name == "submit_output" && res.Output != nil {
			ss.rec.Output = res.Output
			return "completed", "", nil, true
		}
	}
	return "", "", nil, false
}
