// Package policy is the user's taint policy: what the gate does when an outbound tool is
// about to carry data above its clearance. It reads a TOML file of allowlist entries and
// expression rules (github.com/expr-lang/expr), and implements taint.Policy.
//
// It owns the policy file (resolution, parsing, evaluation in Decide) and what `lev
// policy` lists, adds and dry-runs. It must not parse flags or print for a command
// (internal/lev/cli does), and must not gate live calls itself (taintgate plugs it into
// the pipeline).
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/expr-lang/expr/vm"
	"github.com/pelletier/go-toml/v2"

	"github.com/lever-jail/lever/internal/lev/blueprint"
	"github.com/lever-jail/lever/internal/lev/levconfig"
	"github.com/lever-jail/lever/internal/lev/taint"
	"github.com/lever-jail/lever/internal/lev/tomlx"
	"github.com/lever-jail/lever/internal/lev/toolcat"
	"github.com/lever-jail/lever/internal/lev/toolnames"
)

// File is the policy file as written.
type File struct {
	// Default is the verdict when no entry or rule decides: ask (the default), deny, allow.
	Default string `toml:"default,omitempty"`
	// Tools classifies MCP and script tools (or changes a built-in's clearance).
	Tools map[string]ToolGating `toml:"tools,omitempty"`
	Allow []AllowEntry          `toml:"allow,omitempty"`
	Rules []Rule                `toml:"rule,omitempty"`
}

// ToolGating is a [tools.NAME] table: how the gate treats an MCP or script tool.
type ToolGating struct {
	Outbound  *bool  `toml:"outbound,omitempty"`
	Clearance string `toml:"clearance,omitempty"`
}

// AllowEntry is one [[allow]] entry: tool may carry data up to MaxSensitivity to targets
// matching Target.
type AllowEntry struct {
	Tool           string `toml:"tool"`
	Target         string `toml:"target,omitempty"`
	MaxSensitivity string `toml:"max_sensitivity"`
}

// Rule is one [[rule]]: when When (an expression) is true, Action applies.
type Rule struct {
	Name   string `toml:"name,omitempty"`
	When   string `toml:"when"`
	Action string `toml:"action"`
}

// Policy is a loaded, validated policy file.
type Policy struct {
	Path  string
	File  File
	def   taint.Verdict
	max   []taint.Level
	rules []*vm.Program
	// ruleTarget[i]: rule i reads the call's target, so its allow cannot be trusted for a
	// target lev could not read unambiguously.
	ruleTarget []bool
	table      *taint.Table
}

// hostTargeted reports whether tool's target is a host (the web and HTTP tools, by their
// catalogue row), which is matched in its canonical, lower-case spelling.
func hostTargeted(tool string) bool {
	row, ok := toolcat.Lookup(tool)
	return ok && row.Target == toolcat.TargetHost
}

// Resolve is the one resolution of the taint policy file, used by live runs (the taint
// gate, and the file tools' write protection) and by `lev policy` alike:
//
//  1. $LEV_POLICY, which must be absolute: the daemon and `lev policy` run in different
//     directories, and a relative path would name two different files;
//  2. config.toml's [security] policy_file (relative to the config file's directory; ~/
//     is the home directory);
//  3. <lev home>/policy.toml ($LEV_HOME, else ~/.leviath).
func Resolve(cfg *levconfig.Config) (string, error) {
	if p := os.Getenv("LEV_POLICY"); p != "" {
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("LEV_POLICY=%q: must be an absolute path (lev serve and lev policy may run in different directories)", p)
		}
		return p, nil
	}
	if cfg != nil && cfg.Security.PolicyFile != "" {
		p := cfg.Security.PolicyFile
		if strings.HasPrefix(p, "~/") {
			if h, err := os.UserHomeDir(); err == nil {
				p = filepath.Join(h, p[2:])
			}
		} else if !filepath.IsAbs(p) && cfg.File != "" {
			p = filepath.Join(filepath.Dir(cfg.File), p)
		}
		return p, nil
	}
	return filepath.Join(levconfig.Home(), "policy.toml"), nil
}

// PathFor is Resolve for callers that only need a path to protect: on a bad $LEV_POLICY it
// returns the raw value (the run itself fails at the gate, which calls Resolve).
func PathFor(cfg *levconfig.Config) string {
	p, err := Resolve(cfg)
	if err != nil {
		return os.Getenv("LEV_POLICY")
	}
	return p
}

// DefaultPath is the policy file `lev policy` uses when no --policy is given: Resolve with
// the config.toml a live run would load. A config.toml that does not load is an error here
// as it is for a run, never a silent fall back to another file.
func DefaultPath() (string, error) {
	cfg, err := levconfig.Load(levconfig.Path())
	if err != nil {
		return "", fmt.Errorf("resolving the policy file: %w", err)
	}
	return Resolve(cfg)
}

// Load reads and validates the policy file at path. A missing file is the empty policy
// (every call above clearance is an ask).
func Load(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Parse(nil, path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading policy: %w", err)
	}
	return Parse(b, path)
}

// Parse validates policy file contents. Unknown keys and bad values are errors naming the
// key (and the line, where the TOML decoder reports one).
func Parse(data []byte, name string) (*Policy, error) {
	var f File
	// go-toml folds case when matching keys ([[Allow]] would be [[allow]]): refuse that.
	if err := tomlx.ExactKeys(name, data, &f); err != nil {
		return nil, err
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %s", name, describeTOMLError(err))
	}
	p, err := compile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.Path = name
	return p, nil
}

func describeTOMLError(err error) string {
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) {
		var parts []string
		for _, e := range sm.Errors {
			row, _ := e.Position()
			parts = append(parts, fmt.Sprintf("line %d: unknown key %q", row, strings.Join(e.Key(), ".")))
		}
		return strings.Join(parts, "; ")
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, col := de.Position()
		return fmt.Sprintf("line %d column %d: %s", row, col, de.Error())
	}
	return err.Error()
}

func compile(f File) (*Policy, error) {
	p := &Policy{File: f}
	switch strings.ToLower(f.Default) {
	case "", "ask":
		p.def = taint.VerdictAsk
	case "deny":
		p.def = taint.VerdictDeny
	case "allow":
		p.def = taint.VerdictAllow
	default:
		return nil, fmt.Errorf("default: %q is not ask, deny or allow", f.Default)
	}
	over := map[string]taint.Gating{}
	prefixes := map[string]taint.Gating{}
	for name, tc := range f.Tools {
		c := taint.Gating{Outbound: true, Clearance: taint.Public}
		if tc.Outbound != nil {
			c.Outbound = *tc.Outbound
		}
		if tc.Clearance != "" {
			l, err := taint.ParseLevel(tc.Clearance)
			if err != nil {
				return nil, fmt.Errorf("tools.%s.clearance: %w", name, err)
			}
			c.Clearance = l
		} else if c.Outbound {
			return nil, fmt.Errorf("tools.%s: an outbound tool needs a clearance", name)
		}
		if toolnames.IsMCPWildcard(name) {
			// [tools."mcp__SERVER__*"]: every tool of that server (an exact entry wins).
			prefixes[strings.TrimSuffix(name, "*")] = c
			continue
		}
		over[name] = c
	}
	p.table = taint.NewTable(over)
	for pre, c := range prefixes {
		p.table = p.table.WithPrefix(pre, c)
	}
	for i := range f.Allow {
		a := &p.File.Allow[i]
		if a.Tool == "" {
			return nil, fmt.Errorf("allow[%d].tool: missing", i)
		}
		if a.MaxSensitivity == "" {
			return nil, fmt.Errorf("allow[%d].max_sensitivity: missing", i)
		}
		l, err := taint.ParseLevel(a.MaxSensitivity)
		if err != nil {
			return nil, fmt.Errorf("allow[%d].max_sensitivity: %w", i, err)
		}
		if hostTargeted(a.Tool) && a.Target != "" {
			// Calls are matched by their host's one spelling (taint.canonicalHost), so the
			// entry is written in it too: 0x7f.1 is the 127.0.0.1 every spelling reaches.
			h, err := taint.CanonicalHostLiteral(a.Target)
			if err != nil {
				return nil, fmt.Errorf("allow[%d].target: %q is not a host %s calls can be matched to: %w", i, a.Target, a.Tool, err)
			}
			a.Target = h
		}
		p.max = append(p.max, l)
	}
	for i, r := range f.Rules {
		switch r.Action {
		case "allow", "deny", "ask":
		default:
			return nil, fmt.Errorf("rule[%d].action: %q is not allow, deny or ask", i, r.Action)
		}
		if strings.TrimSpace(r.When) == "" {
			return nil, fmt.Errorf("rule[%d].when: missing", i)
		}
		prog, err := compileExpr(r.When, r.Action)
		if err != nil {
			if r.Name != "" {
				return nil, fmt.Errorf("rule[%d].when (%q): %w", i, r.Name, err)
			}
			return nil, fmt.Errorf("rule[%d].when: %w", i, err)
		}
		p.rules = append(p.rules, prog)
		p.ruleTarget = append(p.ruleTarget, readsTarget(prog))
	}
	return p, nil
}

// Table is the tool classification with this policy's [tools] applied.
func (p *Policy) Table() *taint.Table { return p.table }

func (p *Policy) ruleName(i int) string {
	if n := p.File.Rules[i].Name; n != "" {
		return fmt.Sprintf("rule[%d] %q", i, n)
	}
	return fmt.Sprintf("rule[%d]", i)
}

// Decide implements taint.Policy. Precedence: a matching deny rule beats everything (and a
// rule that fails to evaluate counts as a deny); then the first matching allowlist entry or
// allow rule; then an ask rule; then the file's default.
//
// A call whose target is unclear cannot be matched by a deny rule that reads the target:
// the rule might have matched the place the tool really reaches. While any deny rule reads
// the target, such a call is never allowed by an entry or rule that did not read it either
// (an allow becomes an ask), and its ask carries NoWaive: --yolo does not waive it, since
// nobody would then stand in for the deny rule that could not run.
func (p *Policy) Decide(r taint.Request) taint.PolicyDecision {
	d := p.decide(r)
	if r.TargetUnclear == "" || d.Verdict == taint.VerdictDeny {
		return d
	}
	deny := p.denyOnTarget()
	if deny == "" {
		return d
	}
	if d.Verdict == taint.VerdictAllow {
		d.Verdict = taint.VerdictAsk
		d.Reason += fmt.Sprintf("; but %s denies by target, and this call's target is unclear: ask", deny)
	}
	d.NoWaive = fmt.Sprintf("%s denies by target and cannot be matched against an unclear target", deny)
	return d
}

// denyOnTarget names the first deny rule that reads the call's target ("" if none).
func (p *Policy) denyOnTarget() string {
	for i := range p.rules {
		if p.File.Rules[i].Action == "deny" && p.ruleTarget[i] {
			return p.ruleName(i)
		}
	}
	return ""
}

func (p *Policy) decide(r taint.Request) taint.PolicyDecision {
	env := newEnv(r)
	var allow, ask *taint.PolicyDecision
	// near: entries and rules that would have allowed the call but do not apply to it.
	var near []string
	for i, prog := range p.rules {
		ok, err := runExpr(prog, env)
		name := p.ruleName(i)
		if err != nil {
			return taint.PolicyDecision{Verdict: taint.VerdictDeny, Rule: name,
				Reason: fmt.Sprintf("%s failed to evaluate (%v), which counts as deny", name, err)}
		}
		if !ok {
			continue
		}
		d := taint.PolicyDecision{Verdict: taint.Verdict(p.File.Rules[i].Action), Rule: name,
			Reason: fmt.Sprintf("%s matched: %s", name, p.File.Rules[i].When)}
		if d.Verdict == taint.VerdictAllow && r.TargetUnclear != "" && p.ruleTarget[i] {
			// It matched text lev could not read as one destination; a deny or ask rule
			// matching the same text still applies (it only makes the call stricter).
			near = append(near, fmt.Sprintf("%s reads the target, and this call's target is unclear", name))
			continue
		}
		switch d.Verdict {
		case taint.VerdictDeny:
			return d
		case taint.VerdictAllow:
			if allow == nil {
				allow = &d
			}
		case taint.VerdictAsk:
			if ask == nil {
				ask = &d
			}
		}
	}
	for i, a := range p.File.Allow {
		if !Glob(a.Tool, r.Tool) {
			continue
		}
		if a.Target != "" {
			// A target-scoped entry vouches for one destination. A call naming none
			// (`*` would match the empty string) or one lev could not read (the tool may
			// reach another host than the text a glob matched) is not covered by it.
			switch {
			case r.TargetUnclear != "":
				near = append(near, fmt.Sprintf("allow[%d] (%s %q) names a target, and this call's target is unclear", i, a.Tool, a.Target))
				continue
			case r.Target == "":
				near = append(near, fmt.Sprintf("allow[%d] (%s %q) names a target, and this call names none", i, a.Tool, a.Target))
				continue
			case !Glob(a.Target, r.Target):
				continue
			}
		}
		if r.Taint > p.max[i] {
			near = append(near, fmt.Sprintf("allow[%d] (%s %q) stops at %s", i, a.Tool, a.Target, p.max[i]))
			continue
		}
		return taint.PolicyDecision{Verdict: taint.VerdictAllow, Rule: fmt.Sprintf("allow[%d]", i),
			Reason: fmt.Sprintf("allow[%d] lets %s send up to %s to %q", i, a.Tool, p.max[i], DisplayTarget(a.Target))}
	}
	if allow != nil {
		return *allow
	}
	if ask != nil {
		return *ask
	}
	why := "no allowlist entry or rule matched"
	if len(near) > 0 {
		why = strings.Join(near, "; ")
	}
	if p.def == taint.VerdictAllow && r.TargetUnclear != "" {
		// A default of allow leans on deny rules naming the hosts to keep out, and those
		// cannot be matched against a target lev could not read.
		return taint.PolicyDecision{Verdict: taint.VerdictAsk, Reason: fmt.Sprintf("%s; the default is allow, but not for a call whose target is unclear: ask", why)}
	}
	return taint.PolicyDecision{Verdict: p.def, Reason: fmt.Sprintf("%s; the default is %s", why, p.def)}
}

// DisplayTarget is how an allowlist target reads back: empty matches any target, shown as "*".
func DisplayTarget(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

// Glob matches s against pattern, where * is any run of characters (dots and slashes
// included) and ? is one character. Matching is exact otherwise and anchored at both ends,
// so "*.example.com" matches "api.example.com" and "a.b.example.com" but neither
// "example.com" nor "example.com.evil.test".
func Glob(pattern, s string) bool {
	px, sx := 0, 0
	starP, starS := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && (pattern[px] == '?' || pattern[px] == s[sx]):
			px++
			sx++
		case px < len(pattern) && pattern[px] == '*':
			starP, starS = px, sx
			px++
		case starP >= 0:
			starS++
			px, sx = starP+1, starS
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

var strictness = map[taint.Verdict]int{taint.VerdictAllow: 0, taint.VerdictAsk: 1, taint.VerdictDeny: 2}

// ParseVerdict reads allow, ask or deny.
func ParseVerdict(s string) (taint.Verdict, error) {
	v := taint.Verdict(strings.ToLower(strings.TrimSpace(s)))
	if _, ok := strictness[v]; !ok {
		return "", fmt.Errorf("%q is not allow, ask or deny", s)
	}
	return v, nil
}

// Default is the verdict when no entry or rule decides.
func (p *Policy) Default() taint.Verdict { return p.def }

// WithSettings returns a copy with the user's [taint_tracking] settings from config.toml
// applied: on_violation replaces the file's default, clearances classify tools. The user
// owns both, so they may loosen as well as tighten.
func (p *Policy) WithSettings(onViolation taint.Verdict, clearances map[string]taint.Level) *Policy {
	q := *p
	if onViolation != "" {
		q.def = onViolation
	}
	q.table = p.table.With(clearances, false)
	return &q
}

// Tighten returns a copy a blueprint's [taint_tracking] made stricter: the default verdict
// becomes onViolation only if that is stricter (allow < ask < deny), and a clearance only
// ever goes down.
func (p *Policy) Tighten(onViolation taint.Verdict, clearances map[string]taint.Level) *Policy {
	q := *p
	if onViolation != "" && strictness[onViolation] > strictness[q.def] {
		q.def = onViolation
	}
	q.table = p.table.With(clearances, true)
	return &q
}

// ApplyTaintTracking layers a [taint_tracking] table over the policy: the user's
// (config.toml; tighten false) sets on_violation and clearances outright, a blueprint's
// (tighten true) can only make them stricter. A nil table changes nothing.
func (p *Policy) ApplyTaintTracking(t *blueprint.TaintTracking, tighten bool) (*Policy, error) {
	if t == nil {
		return p, nil
	}
	var v taint.Verdict
	if t.OnViolation != "" {
		var err error
		if v, err = ParseVerdict(t.OnViolation); err != nil {
			return nil, fmt.Errorf("on_violation: %w", err)
		}
	}
	cl := map[string]taint.Level{}
	for tool, s := range t.Clearances {
		l, err := taint.ParseLevel(s)
		if err != nil {
			return nil, fmt.Errorf("clearances.%s: %w", tool, err)
		}
		cl[tool] = l
	}
	if tighten {
		return p.Tighten(v, cl), nil
	}
	return p.WithSettings(v, cl), nil
}

// Live is the policy a run's gate applies, built one way for live runs (taintgate.New)
// and `lev policy test` (LoadAsLive), so that the dry run shows what a run does: the
// policy file at path; config.toml's [taint_tracking] (the user's: may loosen); the
// blueprint's [taint_tracking] (may only tighten; nil for the dry run, which has no
// blueprint); and config.toml's per-server MCP classification over every tool of that
// server. cfg nil is no config.toml.
func Live(path string, cfg *levconfig.Config, bp *blueprint.TaintTracking) (*Policy, error) {
	p, err := Load(path)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		if p, err = p.ApplyTaintTracking(cfg.TaintTracking, false); err != nil {
			return nil, fmt.Errorf("config.toml [taint_tracking]: %w", err)
		}
	}
	if p, err = p.ApplyTaintTracking(bp, true); err != nil {
		return nil, fmt.Errorf("blueprint [taint_tracking]: %w", err)
	}
	return p.withMCPClasses(cfg), nil
}

// withMCPClasses applies the user's per-server MCP classification (config.toml's
// [mcp.servers.NAME] classification and clearance) to every tool of that server. A server
// left unclassified stays out of the table: outbound, Public clearance, fail-closed. The
// policy file's [tools.mcp__SERVER__TOOL] for one tool (and any [taint_tracking]
// clearance, an exact entry too) still wins; the config's classification replaces the
// policy file's [tools."mcp__SERVER__*"].
func (p *Policy) withMCPClasses(cfg *levconfig.Config) *Policy {
	if cfg == nil {
		return p
	}
	q := *p
	for _, name := range cfg.MCPServerNames() {
		s := cfg.MCP.Servers[name]
		switch s.Classification {
		case "local":
			q.table = q.table.WithPrefix(toolnames.MCPName(name, ""), taint.Gating{})
		case "outbound":
			l, err := taint.ParseLevel(s.Clearance)
			if err != nil {
				continue // levconfig refused it already
			}
			q.table = q.table.WithPrefix(toolnames.MCPName(name, ""), taint.Gating{Outbound: true, Clearance: l})
		}
	}
	return &q
}
