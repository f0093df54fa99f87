// Package dashboard is lever dashboard's web interface: an http.Handler that shows the
// jail, the broker, the runs with their live events, and the pending ask/gate prompts,
// and answers those prompts.
//
// It owns the pages, their security (the one-time token exchanged for a session cookie,
// the Host check against DNS rebinding, the Origin and CSRF checks on every POST, the
// strict CSP) and the rendering of hostile text as text. It must not reach the jail
// itself: everything it shows comes from a Source, which the CLI implements with the
// same functions lever status, ps, logs -f and broker use, so the page has no second
// path into the jail.
package dashboard

import (
	"context"
	"time"

	"github.com/lever-jail/lever/internal/lev/events"
)

// Source is where the dashboard gets everything it shows and where answers go.
type Source interface {
	Jail(ctx context.Context) (Jail, error)
	Broker(ctx context.Context) (Broker, error)
	Runs(ctx context.Context) ([]Run, error)
	// Events streams a run's events from its first to its end (or until ctx ends),
	// calling send for each in order; send's error ends the stream.
	Events(ctx context.Context, agent, run string, send func(events.Event) error) error
	Prompts(ctx context.Context) ([]Prompt, error)
	// Answer answers a pending prompt: once, session or deny, or (an ask_operator
	// question) the operator's text.
	Answer(ctx context.Context, p Prompt, answer string) error
}

// Jail is the jail page: lever status's view, the egress ruleset and the last
// acceptance report.
type Jail struct {
	Instance string
	Backend  string
	// Guest is the guest's state in words (reachable, provisioned, podman up).
	Guest   []string
	Posture string
	// Verified: the live LEVER_EGRESS ruleset is the desired one.
	Verified bool
	// Differences are the verifier's lines when the live ruleset is not the desired one.
	Differences []string
	// Live and Desired are the rulesets line by line, when the source has them: the page
	// shows their diff when they differ.
	Live, Desired []string
	// Acceptance is the last acceptance report's text ("" when none is stored).
	Acceptance string
}

// Broker is the broker page.
type Broker struct {
	Running      bool
	Listen       string
	CertNotAfter time.Time
	Clients      []Client
	Audit        []AuditLine
}

// Client is one enrolled client certificate.
type Client struct {
	Name     string
	Serial   string
	NotAfter time.Time
}

// AuditLine is one line of the broker's audit log as the page shows it.
type AuditLine struct {
	Time    time.Time
	Who     string
	Route   string
	Status  int
	Outcome string
	Detail  string
	// Tokens the request used, when the broker recorded them (0 otherwise).
	Tokens int
}

// Run is one run of one agent, as lever ps lists it.
type Run struct {
	Agent     string
	ID        string
	Blueprint string
	Status    string
	Stage     string
	Created   time.Time
}

// Prompt is a pending question of a run: a permission ask, a taint-gate prompt, or an
// ask_operator question.
type Prompt struct {
	Agent    string
	Run      string
	ID       string
	Tool     string
	Args     string
	Reason   string
	Gate     bool
	Operator bool
	Asked    time.Time
}

// Answers is what the prompt takes at the terminal: a permission prompt is yes or no
// (once or deny); only the taint gate offers session.
func (p Prompt) Answers() []string {
	if p.Gate {
		return []string{"once", "session", "deny"}
	}
	return []string{"once", "deny"}
}

// Kind names the prompt as the page does.
func (p Prompt) Kind() string {
	switch {
	case p.Operator:
		return "ask_operator"
	case p.Gate:
		return "taint-gate"
	}
	return "permission"
}

// MaxOperatorAnswer caps an ask_operator answer (lev's own cap).
const MaxOperatorAnswer = 16 << 10
