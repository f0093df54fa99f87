package policy

import (
	"fmt"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// env is what a rule's `when` expression sees. Levels are given both as names (taint ==
// "private") and as ranks (taint_level > clearance_level), with PUBLIC, INTERNAL and
// PRIVATE as the rank constants.
type env struct {
	Tool           string `expr:"tool"`
	Target         string `expr:"target"`
	Taint          string `expr:"taint"`
	Clearance      string `expr:"clearance"`
	TaintLevel     int    `expr:"taint_level"`
	ClearanceLevel int    `expr:"clearance_level"`
	Classified     bool   `expr:"classified"`
	Stage          int    `expr:"stage"`
	PUBLIC         int    `expr:"PUBLIC"`
	INTERNAL       int    `expr:"INTERNAL"`
	PRIVATE        int    `expr:"PRIVATE"`
}

func newEnv(r taint.Request) env {
	return env{
		Tool: r.Tool, Target: r.Target, Taint: r.Taint.String(), Clearance: r.Gating.Clearance.String(),
		TaintLevel: int(r.Taint), ClearanceLevel: int(r.Gating.Clearance), Classified: r.Gating.Known,
		Stage: r.Stage, PUBLIC: int(taint.Public), INTERNAL: int(taint.Internal), PRIVATE: int(taint.Private),
	}
}

// maxNodes bounds a rule's size; rules are short predicates, not programs.
const maxNodes = 500

// compileExpr compiles a rule's `when`. action is the rule's: the literals it compares
// the target with are matched as hosts in every spelling (hostMatch), an allow rule's
// only for the tools whose target is always a host.
func compileExpr(src, action string) (*vm.Program, error) {
	hm := &hostMatch{allow: action == "allow"}
	hp := &hostPatcher{}
	prog, err := expr.Compile(src,
		expr.Env(env{}),
		expr.AsBool(),
		expr.MaxNodes(maxNodes),
		expr.Function("glob", func(params ...any) (any, error) {
			return Glob(params[0].(string), params[1].(string)), nil
		}, new(func(string, string) bool)),
		expr.Function(fnSameTarget, func(params ...any) (any, error) {
			return hm.same(params[0].(string), params[1].(string), params[2].(string)), nil
		}, new(func(string, string, string) bool)),
		expr.Function(fnGlobTarget, func(params ...any) (any, error) {
			return hm.glob(params[0].(string), params[1].(string), params[2].(string)), nil
		}, new(func(string, string, string) bool)),
		expr.Function(fnHostGlob, func(params ...any) (any, error) {
			return hm.hostGlob(params[0].(string), params[1].(string), params[2].(string)), nil
		}, new(func(string, string, string) bool)),
		expr.Function(fnTargetIn, func(params ...any) (any, error) {
			for _, v := range params[1].([]any) {
				if s, ok := v.(string); ok && hm.same(params[0].(string), s, params[2].(string)) {
					return true, nil
				}
			}
			return false, nil
		}, new(func(string, []any, string) bool)),
		expr.Patch(hp),
	)
	if err != nil {
		return nil, err
	}
	if hp.err != nil {
		return nil, hp.err
	}
	return prog, nil
}

func runExpr(p *vm.Program, e env) (bool, error) {
	v, err := expr.Run(p, e)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("rule returned %T, not bool", v)
	}
	return b, nil
}

// readsTarget reports whether a compiled rule reads the call's target anywhere.
func readsTarget(p *vm.Program) bool {
	n := p.Node()
	v := &identFinder{name: "target"}
	ast.Walk(&n, v)
	return v.found
}

type identFinder struct {
	name  string
	found bool
}

func (f *identFinder) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok && id.Value == f.name {
		f.found = true
	}
}
