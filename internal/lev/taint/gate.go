package taint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Mode says who, if anyone, can answer the gate's prompt.
type Mode int

const (
	// Interactive: a person answers through the Asker.
	Interactive Mode = iota
	// Headless: nobody to ask; an ask is a block (AutoBlock).
	Headless
	// Yolo (--yolo): the gate is still evaluated, but an ask's AutoBlock is waived
	// (YoloAutoApprove) and both are audited. A policy deny is not an ask and stays.
	Yolo
)

func (m Mode) String() string {
	switch m {
	case Interactive:
		return "interactive"
	case Headless:
		return "headless"
	case Yolo:
		return "yolo"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Verdict is what a policy says about a call whose data is above the tool's clearance.
type Verdict string

const (
	VerdictAllow Verdict = "allow"
	VerdictDeny  Verdict = "deny"
	VerdictAsk   Verdict = "ask"
)

// Request is what a policy sees.
type Request struct {
	Tool   string
	Target string
	// TargetUnclear says why the target could not be read unambiguously (Target); Target
	// is then the raw text, and no target-scoped entry may match it.
	TargetUnclear string
	Taint         Level
	Gating        Gating
	Stage         int
}

// PolicyDecision is a policy's answer, with the rule that decided (empty for the default)
// and why, for the audit record and `lev policy test`.
type PolicyDecision struct {
	Verdict Verdict
	Rule    string
	Reason  string
	// NoWaive, on an ask, says why --yolo must not waive it (an unclear target that a
	// deny rule on the target could not be matched against): it blocks as headless.
	NoWaive string `json:",omitempty"`
}

// Policy decides calls above clearance. internal/lev/policy implements it from the
// user's policy file.
type Policy interface {
	Decide(Request) PolicyDecision
}

// AskAlways is the policy with no rules: every call above clearance is an ask.
type AskAlways struct{}

func (AskAlways) Decide(Request) PolicyDecision {
	return PolicyDecision{Verdict: VerdictAsk, Reason: "no policy rule matched; the default is ask"}
}

// Answer is a person's answer to the gate's prompt.
type Answer int

const (
	AnswerDeny Answer = iota
	AnswerOnce
	AnswerSession
)

// Prompt is what the Asker shows: the request, why it is asked, and the call's arguments,
// since the target alone does not say what would be sent (and an unclear one not even
// where).
type Prompt struct {
	Request
	Reason string
	Args   json.RawMessage
}

// Asker puts the prompt to a person: allow once, allow for the session, or deny.
type Asker interface {
	Ask(ctx context.Context, p Prompt) (Answer, error)
}

// AskFunc adapts a function to Asker.
type AskFunc func(ctx context.Context, p Prompt) (Answer, error)

func (f AskFunc) Ask(ctx context.Context, p Prompt) (Answer, error) { return f(ctx, p) }

// Source is a record's decision_source.
type Source string

const (
	// WithinClearance: the data's label is at or below the tool's clearance.
	SourceWithinClearance Source = "WithinClearance"
	// SessionAllow: an earlier "allow for session" answer covers this tool, target and label.
	SourceSessionAllow Source = "SessionAllow"
	SourcePolicyAllow  Source = "PolicyAllow"
	SourcePolicyDeny   Source = "PolicyDeny"
	SourceUserOnce     Source = "UserAllowOnce"
	SourceUserSession  Source = "UserAllowSession"
	SourceUserDeny     Source = "UserDeny"
	// AskFailed: the prompt could not be answered (closed, cancelled); blocked.
	SourceAskFailed Source = "AskFailed"
	// AutoBlock: the policy said ask and nobody can answer.
	SourceAutoBlock Source = "AutoBlock"
	// YoloAutoApprove: --yolo waived the AutoBlock recorded just before it.
	SourceYoloAutoApprove Source = "YoloAutoApprove"
)

// Call is one outbound tool call as the pipeline presents it to the gate.
type Call struct {
	Tool   string
	Target string
	// TargetUnclear: see Request.
	TargetUnclear string
	// Taint is the label of the data the call could carry: the context's level.
	Taint  Level
	Stage  int
	CallID string
	// NoAsk: nobody is put to a prompt for this call (a run's error text, decided as the
	// run ends): an ask blocks as in headless mode (--yolo still waives what it may).
	NoAsk bool
	// Args gives the call's decoded arguments, shown to the person asked; called only
	// then, so a call the gate lets through unasked (a write_file's whole content) is
	// not encoded again for nothing. Nil: none to show.
	Args func() json.RawMessage
}

// Outcome is the gate's answer for one call.
type Outcome struct {
	Allowed bool
	// Gated is false for tools the table does not treat as outbound (nothing audited).
	Gated  bool
	Source Source
	Reason string
	// Records are the audit records written for this call, in order (two under --yolo).
	Records []Record
}

// Gate is the taint gate. One per run: session answers live in it.
type Gate struct {
	Table  *Table
	Policy Policy
	Mode   Mode
	Asker  Asker
	Audit  Auditor
	Now    func() time.Time

	mu      sync.Mutex
	seq     int
	session map[sessionKey]Level
}

// sessionKey is what an "allow for session" answer covers: the tool, its target's text,
// and whether that text is an unclear target's raw text. For an unclear target the text
// is not the key: it joins label=value pairs unescaped, so two calls sending to different
// places can spell it alike (url "https://a.example/ host=evil.test" alone, and url and
// host apart). The key is then the digest of the call's whole arguments, as encoded for
// the person asked: an answer covers exactly the call that was shown.
type sessionKey struct {
	tool, target string
	unclear      bool
}

// keyOf is c's session key.
func keyOf(c Call) sessionKey {
	if c.TargetUnclear == "" {
		return sessionKey{c.Tool, c.Target, false}
	}
	target := c.Target
	if c.Args != nil {
		sum := sha256.Sum256(c.Args())
		target = "args sha256:" + hex.EncodeToString(sum[:])
	}
	return sessionKey{c.Tool, target, true}
}

// Check decides one call. Nothing has fired yet when it returns; the caller runs the tool
// only when Outcome.Allowed. Every decision on an outbound tool is audited before Check
// returns, and a failure to write the audit record blocks the call.
func (g *Gate) Check(ctx context.Context, c Call) (Outcome, error) {
	class := g.Table.Gating(c.Tool)
	if !class.Outbound {
		return Outcome{Allowed: true, Source: "NotGated", Reason: c.Tool + " cannot send data off the machine"}, nil
	}
	req := Request{Tool: c.Tool, Target: c.Target, TargetUnclear: c.TargetUnclear, Taint: c.Taint, Gating: class, Stage: c.Stage}
	base := Record{
		Stage: c.Stage, CallID: c.CallID, Tool: c.Tool, Target: c.Target,
		Classified: class.Known, Taint: c.Taint, Clearance: class.Clearance, Mode: g.Mode.String(),
	}
	var out Outcome
	out.Gated = true
	emit := func(r Record) (int, error) {
		g.mu.Lock()
		g.seq++
		r.Seq = g.seq
		g.mu.Unlock()
		if g.Now != nil {
			r.Time = g.Now().UTC()
		} else {
			r.Time = time.Now().UTC()
		}
		out.Records = append(out.Records, r)
		if g.Audit == nil {
			return r.Seq, nil
		}
		if err := g.Audit.Record(r); err != nil {
			return r.Seq, fmt.Errorf("writing taint audit for %s: %w", c.Tool, err)
		}
		return r.Seq, nil
	}
	finish := func(allowed bool, src Source, reason string, r Record) (Outcome, error) {
		r.Decision = "block"
		if allowed {
			r.Decision = "allow"
		}
		r.DecisionSource = src
		r.Reason = reason
		if _, err := emit(r); err != nil {
			return Outcome{Gated: true, Source: src, Reason: err.Error(), Records: out.Records}, err
		}
		out.Allowed, out.Source, out.Reason = allowed, src, reason
		return out, nil
	}

	if c.Taint <= class.Clearance {
		return finish(true, SourceWithinClearance,
			fmt.Sprintf("data is %s, within %s's clearance (%s)", c.Taint, c.Tool, class.Clearance), base)
	}
	above := fmt.Sprintf("data is %s, above %s's clearance (%s)", c.Taint, c.Tool, class.Clearance)
	if !class.Known {
		above += "; " + c.Tool + " has no classification, so it is treated as outbound with public clearance"
	}
	if c.TargetUnclear != "" {
		above += fmt.Sprintf("; its target %q is unclear: %s", c.Target, c.TargetUnclear)
	}
	// An unclear target's raw text may read as a clear target (a path may be any text):
	// the answer for one does not cover the other.
	key := keyOf(c)
	g.mu.Lock()
	sl, hasSession := g.session[key]
	g.mu.Unlock()
	if hasSession && c.Taint <= sl {
		return finish(true, SourceSessionAllow, above+"; allowed for this session by an earlier answer", base)
	}

	pol := g.Policy
	if pol == nil {
		pol = AskAlways{}
	}
	pd := pol.Decide(req)
	r := base
	r.Policy, r.Rule = string(pd.Verdict), pd.Rule
	why := above + "; " + pd.Reason
	switch pd.Verdict {
	case VerdictAllow:
		return finish(true, SourcePolicyAllow, why, r)
	case VerdictAsk:
	default: // deny, and anything unrecognised, fails closed
		return finish(false, SourcePolicyDeny, why, r)
	}

	switch {
	case g.Mode == Interactive && g.Asker != nil && !c.NoAsk:
		var args json.RawMessage
		if c.Args != nil {
			args = c.Args()
		}
		ans, err := g.Asker.Ask(ctx, Prompt{Request: req, Reason: why, Args: args})
		if err != nil {
			return finish(false, SourceAskFailed, why+"; the prompt got no answer: "+err.Error(), r)
		}
		switch ans {
		case AnswerOnce:
			return finish(true, SourceUserOnce, why+"; you allowed it once", r)
		case AnswerSession:
			g.mu.Lock()
			if g.session == nil {
				g.session = map[sessionKey]Level{}
			}
			g.session[key] = Max(g.session[key], c.Taint)
			g.mu.Unlock()
			return finish(true, SourceUserSession, why+"; you allowed it for this session", r)
		default:
			return finish(false, SourceUserDeny, why+"; you denied it", r)
		}
	case g.Mode == Yolo && pd.NoWaive != "":
		return finish(false, SourceAutoBlock, why+"; nobody to ask, so blocked; --yolo does not waive it: "+pd.NoWaive, r)
	case g.Mode == Yolo:
		blk := r
		blk.Decision, blk.DecisionSource = "block", SourceAutoBlock
		blk.Reason = why + "; nobody to ask, so blocked"
		blk.Waived = true
		seq, err := emit(blk)
		if err != nil {
			return Outcome{Gated: true, Source: SourceAutoBlock, Reason: err.Error(), Records: out.Records}, err
		}
		r.Overrides = seq
		return finish(true, SourceYoloAutoApprove, why+"; --yolo waived the AutoBlock (record "+fmt.Sprint(seq)+")", r)
	default:
		return finish(false, SourceAutoBlock, why+"; nobody to ask, so blocked", r)
	}
}
