package runner

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/lever-jail/lever/internal/lev/events"
	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// EventsPath is a run's events.jsonl.
func (s *Store) EventsPath(id string) string {
	return filepath.Join(s.RunDir(id), events.FileName)
}

// LiveEvents is the open events log of a run being driven, nil for any other run (its
// file is complete: read it).
func (e *Engine) LiveEvents(id string) *events.Log {
	e.mu.Lock()
	defer e.mu.Unlock()
	if l := e.runs[id]; l != nil {
		return l.log
	}
	return nil
}

// openEvents opens the run's events log for a leg (spawn or resume) and registers it.
func (e *Engine) openEvents(r *run) error {
	l, err := events.Open(e.Store.EventsPath(r.rec.ID), r.rec.ID)
	if err != nil {
		return err
	}
	r.ev = l
	e.mu.Lock()
	e.entry(r.rec.ID).log = l
	e.mu.Unlock()
	return nil
}

// closeEvents closes a leg's log: readers see the file is complete.
func (e *Engine) closeEvents(r *run) {
	if r.ev == nil {
		return
	}
	e.mu.Lock()
	if l := e.runs[r.rec.ID]; l != nil && l.log == r.ev {
		l.log = nil
		e.tidy(r.rec.ID)
	}
	e.mu.Unlock()
	if err := r.ev.Close(); err != nil {
		e.logf("run %s: %v", r.rec.ID, err)
	}
}

// emit appends one event to the run's log. A failed write is kept by the log and ends the
// run at its next check (evErr); the daemon's log says so at once.
func (r *run) emit(e *Engine, ev events.Event) {
	if r.ev == nil {
		return
	}
	if _, err := r.ev.Emit(ev); err != nil && !r.evWarned {
		r.evWarned = true
		e.logf("run %s: %v", r.rec.ID, err)
	}
}

// evErr is the events log's first write error.
func (r *run) evErr() error {
	if r.ev == nil {
		return nil
	}
	return r.ev.Err()
}

func intp(i int) *int { return &i }

// callEvent is a tool call's event once the pipeline has decided on it (before it runs).
func callEvent(c *pipeline.Call, res *pipeline.Result) events.Event {
	ev := events.Event{Type: events.ToolCall, Stage: c.Stage.Name, StageIndex: intp(c.Stage.Index), Call: c.ID,
		Tool: c.Tool, Args: events.CapArgs(c.ArgsJSON()), Decision: events.Allowed}
	if c.Permission != "" {
		ev.Source = "permission " + string(c.Permission) + " (" + c.PermissionSource + ")"
	}
	if c.Gate != nil {
		ev.Taint, ev.Clearance = c.Gate.Taint, c.Gate.Clearance
	}
	switch {
	case res != nil && res.Refusal != nil:
		ev.Decision, ev.Step, ev.Message = events.Refused, res.Refusal.Step, res.Refusal.Msg
	case res != nil:
		// Not a refusal but no run either (a missing file at the fence): an error result.
		ev.Decision, ev.Message = events.Refused, res.Content
		ev.Step = pipeline.StepFence
	case c.Gate != nil && gateAsked(c.Gate.Source):
		ev.Decision = events.Gated
	case c.Permission == "ask":
		ev.Decision = events.Asked
	}
	return ev
}

// gateAsked: the gate's decision came from a person (now or earlier in the session).
func gateAsked(src string) bool {
	switch taint.Source(src) {
	case taint.SourceUserOnce, taint.SourceUserSession, taint.SourceSessionAllow:
		return true
	}
	return false
}

// gateEvent is the taint gate's decision on a call, when it is worth a line: the gate
// asked, blocked, or was overridden. Quiet passes (within clearance, not gated, tracking
// off, policy allow) are not events; the call's own event says it was allowed.
func gateEvent(c *pipeline.Call) (events.Event, bool) {
	d := c.Gate
	if d == nil {
		return events.Event{}, false
	}
	switch d.Source {
	case string(taint.SourceWithinClearance), "NotGated", "TaintTrackingOff", string(taint.SourcePolicyAllow):
		return events.Event{}, false
	}
	ev := events.Event{Type: events.Gate, Stage: c.Stage.Name, StageIndex: intp(c.Stage.Index), Call: c.ID, Tool: c.Tool,
		Source: d.Source, Message: d.Reason, Decision: events.Allowed, Taint: d.Taint, Clearance: d.Clearance}
	if !d.Allow {
		ev.Decision, ev.Step = events.Refused, pipeline.StepGate
	}
	switch taint.Source(d.Source) {
	case taint.SourceUserOnce:
		ev.Answer = AnswerOnce
	case taint.SourceUserSession, taint.SourceSessionAllow:
		ev.Answer = AnswerSession
	case taint.SourceUserDeny:
		ev.Answer = AnswerDeny
	}
	return ev, true
}

// resultEvent is a tool call's outcome.
func resultEvent(c *pipeline.Call, res *pipeline.Result) events.Event {
	ev := events.Event{Type: events.ToolResult, Stage: c.Stage.Name, StageIndex: intp(c.Stage.Index), Call: c.ID, Tool: c.Tool,
		Bytes: len(res.Content), DurationMS: float64(res.Duration.Microseconds()) / 1000, Status: events.StatusOK}
	if res.IsError {
		ev.Status = events.StatusError
		msg := res.Content
		if len(msg) > events.MaxArgs {
			msg = msg[:events.MaxArgs] + "…"
		}
		ev.Message = msg
	}
	if res.Refusal != nil {
		ev.Status, ev.Step = events.StatusRefused, res.Refusal.Step
	}
	return ev
}

// MaxEventOutput caps the output a result event carries; lev result reads it whole.
const MaxEventOutput = 16 << 10

func resultOutputEvent(out json.RawMessage) events.Event {
	ev := events.Event{Type: events.Result, Bytes: len(out), Status: events.Status(StatusCompleted)}
	if len(out) <= MaxEventOutput {
		ev.Output = out
	} else {
		ev.Message = fmt.Sprintf("%d bytes: lev result RUN prints it", len(out))
	}
	return ev
}

// startEvents opens the run's events log for this leg and writes its run_start.
func (e *Engine) startEvents(r *run, how string) error {
	if err := e.openEvents(r); err != nil {
		return fmt.Errorf("run %s: %w", r.rec.ID, err)
	}
	r.emit(e, events.Event{Type: events.RunStart, Agent: r.rec.Agent, Status: events.Status(StatusRunning), Message: how + " in " + r.rec.Workdir})
	if err := r.evErr(); err != nil {
		e.closeEvents(r)
		return fmt.Errorf("run %s: %w", r.rec.ID, err)
	}
	r.rec.FirstEvent = r.ev.Last()
	return nil
}
