package policy

// What `lev policy` shows and changes: the listing, an allowlist entry added in place, and
// the dry run of the gate. The command itself (flags, output choice) is in internal/lev/cli.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// List prints the policy the way `lev policy list` shows it.
func (p *Policy) List(w io.Writer) error {
	fmt.Fprintf(w, "policy file: %s\n", p.Path)
	fmt.Fprintf(w, "default above clearance: %s\n", p.def)
	fmt.Fprintln(w, "gated tools (clearance):")
	for _, t := range p.table.Outbound() {
		fmt.Fprintf(w, "  %-16s %s\n", t, p.table.Gating(t).Clearance)
	}
	fmt.Fprintln(w, "  (any other tool)  public: unclassified tools are treated as outbound")
	if len(p.File.Tools) > 0 {
		names := make([]string, 0, len(p.File.Tools))
		for n := range p.File.Tools {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintln(w, "classified by this policy:")
		for _, n := range names {
			c := p.table.Gating(n)
			if c.Outbound {
				fmt.Fprintf(w, "  %s: outbound, clearance %s\n", n, c.Clearance)
			} else {
				fmt.Fprintf(w, "  %s: not outbound\n", n)
			}
		}
	}
	fmt.Fprintln(w, "allowlist:")
	if len(p.File.Allow) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for i, a := range p.File.Allow {
		fmt.Fprintf(w, "  allow[%d] %s --target %q --max-sensitivity %s\n", i, a.Tool, DisplayTarget(a.Target), p.max[i])
	}
	fmt.Fprintln(w, "rules:")
	if len(p.File.Rules) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for i, r := range p.File.Rules {
		fmt.Fprintf(w, "  %s: %s when %s\n", p.ruleName(i), r.Action, r.When)
	}
	return nil
}

// AddAllow appends an [[allow]] entry to the policy file at path, keeping the file's text
// (comments included) and validating the result before it replaces the file; on any error
// the file is unchanged. It returns the new entry's index.
func AddAllow(path string, a AllowEntry) (int, error) {
	if a.Tool == "" || strings.ContainsAny(a.Tool, "\n\"") {
		return 0, fmt.Errorf("tool name %q is not valid", a.Tool)
	}
	if _, err := taint.ParseLevel(a.MaxSensitivity); err != nil {
		return 0, fmt.Errorf("--max-sensitivity: %w", err)
	}
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return 0, fmt.Errorf("reading policy: %w", err)
	}
	if _, err := Parse(old, path); err != nil {
		return 0, fmt.Errorf("not changing a policy file that does not load: %w", err)
	}
	var b strings.Builder
	b.Write(old)
	if len(old) > 0 && !strings.HasSuffix(string(old), "\n") {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "\n[[allow]]\ntool = %s\n", strconv.Quote(a.Tool))
	if a.Target != "" {
		fmt.Fprintf(&b, "target = %s\n", strconv.Quote(a.Target))
	}
	fmt.Fprintf(&b, "max_sensitivity = %s\n", strconv.Quote(strings.ToLower(a.MaxSensitivity)))
	p, err := Parse([]byte(b.String()), path)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, fmt.Errorf("creating policy dir: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return 0, fmt.Errorf("writing policy: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return 0, fmt.Errorf("writing policy: %w", err)
	}
	return len(p.File.Allow) - 1, nil
}

// LoadAsLive loads the policy file at path with the config.toml a live run loads, through
// the constructor the live gate uses (Live), so a dry run shows what a run would do. note
// says what config.toml contributed ("" when nothing, or when it does not load: a config
// that does not load fails the live run itself, not the dry run).
func LoadAsLive(path string) (p *Policy, note string, err error) {
	cfg, err := levconfig.Load(levconfig.Path())
	if err != nil {
		cfg = nil
	}
	if p, err = Live(path, cfg, nil); err != nil {
		return nil, "", err
	}
	if cfg == nil {
		return p, "", nil
	}
	var notes []string
	if cfg.TaintTracking != nil {
		n := "config.toml [taint_tracking] applied (" + cfg.File + ")"
		if e := cfg.TaintTracking.Enabled; e != nil && !*e {
			n += "; NOTE: enabled = false there, so live runs skip the gate unless a blueprint turns it on"
		}
		notes = append(notes, n)
	}
	var classes []string
	for _, name := range cfg.MCPServerNames() {
		switch s := cfg.MCP.Servers[name]; s.Classification {
		case "local":
			classes = append(classes, name+": local")
		case "outbound":
			classes = append(classes, name+": outbound, clearance "+s.Clearance)
		}
	}
	if len(classes) > 0 {
		notes = append(notes, "config.toml MCP server classification applied ("+strings.Join(classes, "; ")+")")
	}
	return p, strings.Join(notes, "\n"), nil
}

// DryRunResult is what `lev policy test` reports: per mode, the gate's outcome and the
// audit records it would have written.
type DryRunResult struct {
	Tool   string `json:"tool"`
	Target string `json:"target"`
	// TargetUnclear: the target, given as a URL, is one lev cannot read unambiguously.
	TargetUnclear string                   `json:"target_unclear,omitempty"`
	Taint         taint.Level              `json:"taint"`
	Gating        taint.Gating             `json:"-"`
	Policy        taint.PolicyDecision     `json:"-"`
	Modes         map[string]taint.Outcome `json:"modes"`
	Asked         bool                     `json:"asked"`
}

// DryRun runs the real gate (taint.Gate.Check) for the call in each mode, with the audit
// kept in memory and, in interactive mode, a prompt that is noted and answered "deny".
func (p *Policy) DryRun(ctx context.Context, tool, target string, l taint.Level) (*DryRunResult, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	target, unclear := taint.GivenTarget(tool, target)
	res := &DryRunResult{Tool: tool, Target: target, TargetUnclear: unclear, Taint: l, Gating: p.table.Gating(tool), Modes: map[string]taint.Outcome{}}
	res.Policy = p.Decide(taint.Request{Tool: tool, Target: target, TargetUnclear: unclear, Taint: l, Gating: res.Gating})
	for _, m := range []taint.Mode{taint.Interactive, taint.Headless, taint.Yolo} {
		g := &taint.Gate{Table: p.table, Policy: p, Mode: m, Audit: &taint.MemAudit{}}
		if m == taint.Interactive {
			g.Asker = taint.AskFunc(func(context.Context, taint.Prompt) (taint.Answer, error) {
				res.Asked = true
				return taint.AnswerDeny, nil
			})
		}
		out, err := g.Check(ctx, taint.Call{Tool: tool, Target: target, TargetUnclear: unclear, Taint: l})
		if err != nil {
			return nil, err
		}
		res.Modes[m.String()] = out
	}
	return res, nil
}

// Print writes the human form.
func (r *DryRunResult) Print(w io.Writer) {
	kind := "built-in"
	if !r.Gating.Known {
		kind = "unclassified, so treated as outbound (fails closed)"
	}
	if !r.Gating.Outbound {
		fmt.Fprintf(w, "%s (%s) cannot send data off the machine: not gated, runs in every mode\n", r.Tool, kind)
		return
	}
	fmt.Fprintf(w, "tool:      %s (%s, clearance %s)\n", r.Tool, kind, r.Gating.Clearance)
	fmt.Fprintf(w, "target:    %q\n", r.Target)
	if r.TargetUnclear != "" {
		fmt.Fprintf(w, "           unclear: %s; no target-scoped entry applies\n", r.TargetUnclear)
	}
	fmt.Fprintf(w, "taint:     %s\n", r.Taint)
	if r.Taint <= r.Gating.Clearance {
		fmt.Fprintf(w, "decision:  runs in every mode: %s\n", r.Modes["headless"].Reason)
		return
	}
	rule := r.Policy.Rule
	if rule == "" {
		rule = "default"
	}
	fmt.Fprintf(w, "policy:    %s (%s): %s\n", r.Policy.Verdict, rule, r.Policy.Reason)
	line := func(name string, o taint.Outcome) {
		srcs := make([]string, 0, len(o.Records))
		for _, rec := range o.Records {
			srcs = append(srcs, string(rec.DecisionSource))
		}
		verdict := "BLOCKED before it fires"
		if o.Allowed {
			verdict = "runs"
		}
		fmt.Fprintf(w, "  %-12s %s; audited as %s\n", name+":", verdict, strings.Join(srcs, " + "))
	}
	if r.Asked {
		fmt.Fprintf(w, "  %-12s asks you: allow once / allow for session / deny\n", "interactive:")
	} else {
		line("interactive", r.Modes["interactive"])
	}
	line("headless", r.Modes["headless"])
	line("--yolo", r.Modes["yolo"])
}
