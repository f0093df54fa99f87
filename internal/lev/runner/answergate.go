package runner

import (
	"context"
	"fmt"

	"github.com/lever-jail/lever/internal/lev/pipeline"
)

// gateAnswer puts a plain final answer through the taint gate as the submit_output it
// stands for: it becomes the stage's output, and for the last stage the result served by
// GET /api/agents/{id}/result, so it leaves the machine the same way (docs/lev-security.md, "Which tools are gated"). It returns
// the refusal when the gate blocks it; the gate has audited the decision either way. The
// error is a failure to record the refusal.
func (e *Engine) gateAnswer(ctx context.Context, r *run, pst pipeline.Stage, ss *stageState, text string) (*pipeline.Refusal, error) {
	c := pipeline.AnswerCall(fmt.Sprintf("answer-%d", ss.rec.Turns), pst, text)
	var d pipeline.Decision
	var err error
	if r.pipe == nil || r.pipe.Gate == nil {
		// Fail closed, like the pipeline: no gate, no answer leaves.
		d = pipeline.Decision{Allow: false, Reason: "this lev has no taint gate wired", Source: "no-gate"}
	} else {
		d, err = r.pipe.Gate.Check(ctx, c)
	}
	if err != nil {
		d = pipeline.Decision{Allow: false, Reason: err.Error(), Source: "GateError"}
	}
	c.Gate = &d
	if gev, ok := gateEvent(c); ok {
		r.emit(e, gev)
	}
	if d.Allow {
		return nil, nil
	}
	ref := &pipeline.Refusal{Step: pipeline.StepGate, Code: d.Source,
		Msg: "your final answer leaves the machine like submit_output and was blocked by the taint gate: " + d.Reason}
	return ref, e.record(r, ss, c, &pipeline.Result{Content: ref.Msg, IsError: true, Refusal: ref})
}
