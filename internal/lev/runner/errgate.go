package runner

// A run's error text leaves the way its result does (docs/lev-security.md, "A run's error
// is output too").

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/lev/pipeline"
	"github.com/lever-jail/lever/internal/lev/readpaths"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// errorFile holds a run's last withheld error text, in the run's records (labelled with the
// run, readable by the operator, read by no tool without a grant of the runs directory).
const errorFile = "error.txt"

// gateError puts the text a run ends with through the taint gate before it becomes the
// run's error: run.json's error and refusal, which GET /api/agents/{id}, .../result and
// `lev ps --json` serve, and the run_end event. That text can carry what the model chose
// (a refused read names the path it asked for, which may spell a secret; a symlink's
// target shows up as "resolves to") or what a tool read, so it is output like the result:
// the gate decides it as the submit_output it stands in for, without asking anyone (the
// run is ending). Let through, it is kept whole; blocked, the run's error says what
// happened without the text, which is kept in runs/<id>/error.txt. A refusal keeps its
// step and code (lev resume still applies) and loses its message.
func (e *Engine) gateError(ctx context.Context, r *run, msg string, ref *pipeline.Refusal) (string, *pipeline.Refusal) {
	if msg == "" {
		return msg, ref
	}
	stage := r.rec.Stage
	name := ""
	if stage >= 0 && stage < len(r.rec.Stages) {
		name = r.rec.Stages[stage].Name
	}
	var d pipeline.Decision
	c := pipeline.AnswerCall(fmt.Sprintf("run-error-%d", stage), pipeline.Stage{Index: stage, Name: name}, msg)
	var err error
	var gate pipeline.Gate
	if r.pipe != nil {
		gate = r.pipe.Gate
	}
	switch g := gate.(type) {
	case nil:
		// Fail closed, like a final answer with no gate.
		d = pipeline.Decision{Allow: false, Source: "no-gate", Reason: "this lev has no taint gate wired"}
	case interface {
		CheckUnasked(context.Context, *pipeline.Call) (pipeline.Decision, error)
	}:
		d, err = g.CheckUnasked(ctx, c)
	default:
		d, err = g.Check(ctx, c)
	}
	if err != nil {
		d = pipeline.Decision{Allow: false, Source: "GateError", Reason: err.Error()}
	}
	if d.Allow {
		return msg, ref
	}
	where := filepath.Join(e.Store.RunDir(r.rec.ID), errorFile)
	if err := os.WriteFile(where, []byte(msg+"\n"), 0o600); err != nil {
		where = "the run's stage records (" + errorFile + " could not be written: " + err.Error() + ")"
	}
	what := "the run failed"
	if ref != nil {
		what = fmt.Sprintf("the run stopped on a call refused at the %s step (%s)", ref.Step, ref.Code)
	}
	out := fmt.Sprintf("%s in stage %d; its message is withheld: it may carry the run's data, and the taint gate kept it out of the run's error (%s); the message is in %s",
		what, stage, d.Source, where)
	if ref != nil && ref.Code == workfs.CodeNotGranted {
		// Which entry the refused path fell under is the model's choice; the line for
		// every entry the config does not grant is not.
		var ungranted []string
		for _, rp := range r.rec.ReadPaths {
			if !rp.Granted {
				ungranted = append(ungranted, rp.Entry)
			}
		}
		if len(ungranted) > 0 {
			out += "; [read_paths] entries your config does not grant: " + strings.Join(ungranted, ", ") +
				"; to grant them, add to your config.toml: " + readpaths.GrantLine(r.rec.Agent, ungranted)
		}
		out += " (then: lev resume " + r.rec.ID + ")"
	}
	if ref != nil {
		ref = &pipeline.Refusal{Step: ref.Step, Code: ref.Code, Msg: out}
	}
	return out, ref
}
