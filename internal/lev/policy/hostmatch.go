package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/expr-lang/expr/ast"

	"github.com/lever-jail/lever/internal/lev/taint"
)

// A rule compares the call's target with literals the user wrote; calls are matched by
// their host's one spelling (127.0.0.1 for 0x7f.1, example.com for EXAMPLE.com.), so a
// literal in another spelling would never match and a deny rule would let the host
// through (issue 27 item 3). The patcher rewrites each comparison of `target` with a
// literal (==, !=, in [...], glob(...)) into a call that also compares the literal's
// canonical form. It is done when the rule runs, not by rewriting the literal, because
// `target` is a command or a path for other tools, where "README.MD" must stay as it is.
const (
	fnSameTarget = "lev_same_target"
	fnGlobTarget = "lev_glob_target"
	fnTargetIn   = "lev_target_in"
	fnHostGlob   = "lev_host_glob"
)

// hostMatch compares a target with a literal. A deny or ask rule takes the literal's
// host reading for any call whose target is a host in canonical form (it can only make
// the call stricter); an allow rule only for the web and HTTP tools, whose target is
// always a host, so that an allow never matches a path or command more than it says.
type hostMatch struct{ allow bool }

func (m *hostMatch) hostCall(tool, target string) bool {
	if m.allow && !hostTargeted(tool) {
		return false
	}
	return taint.CanonicalTarget(target)
}

func (m *hostMatch) same(target, lit, tool string) bool {
	if target == lit {
		return true
	}
	if !m.hostCall(tool, target) {
		return false
	}
	h, err := taint.CanonicalHostLiteral(lit)
	return err == nil && h == target
}

func (m *hostMatch) glob(pattern, target, tool string) bool {
	if Glob(pattern, target) {
		return true
	}
	return m.hostGlob(pattern, target, tool)
}

// hostGlob matches only the pattern's host reading (startsWith, endsWith and contains
// keep their own text comparison).
func (m *hostMatch) hostGlob(pattern, target, tool string) bool {
	if !m.hostCall(tool, target) {
		return false
	}
	h, err := taint.CanonicalHostLiteral(pattern)
	if err == nil {
		return Glob(h, target)
	}
	if strings.ContainsAny(pattern, "*?") {
		// "*bücher*": no ASCII form, so compare the Unicode forms.
		if pu, tu, ok := taint.UnicodeForms(pattern, target); ok {
			return Glob(pu, tu)
		}
	}
	return false
}

// hostPatcher rewrites comparisons of `target` with string literals (see above) and
// refuses a literal that spells an address ambiguously (0x7f.*): read as text it would
// miss every other spelling, read as an address it is a guess.
type hostPatcher struct{ err error }

func isTarget(n ast.Node) bool {
	id, ok := n.(*ast.IdentifierNode)
	return ok && id.Value == "target"
}

func (p *hostPatcher) check(n ast.Node) {
	s, ok := n.(*ast.StringNode)
	if !ok || p.err != nil {
		return
	}
	if _, err := taint.CanonicalHostLiteral(s.Value); errors.Is(err, taint.ErrAmbiguousHost) {
		p.err = fmt.Errorf("%q is compared with the target but spells a host ambiguously: %v", s.Value, err)
	}
}

func call(name string, args ...ast.Node) ast.Node {
	args = append(args, &ast.IdentifierNode{Value: "tool"})
	return &ast.CallNode{Callee: &ast.IdentifierNode{Value: name}, Arguments: args}
}

func (p *hostPatcher) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.BinaryNode:
		lit, other := n.Right, n.Left
		if isTarget(n.Right) {
			lit, other = n.Left, n.Right
		}
		if !isTarget(other) {
			return
		}
		switch n.Operator {
		case "==", "!=":
			if _, ok := lit.(*ast.StringNode); !ok {
				return
			}
			p.check(lit)
			c := call(fnSameTarget, other, lit)
			if n.Operator == "!=" {
				c = &ast.UnaryNode{Operator: "not", Node: c}
			}
			ast.Patch(node, c)
		case "startsWith", "endsWith", "contains":
			// Text operators on a host: the literal is a piece of a host, compared as the
			// glob pattern it stands for, so `target endsWith ".EVIL.test"` also meets
			// a.evil.test.
			s, ok := n.Right.(*ast.StringNode)
			if !ok || !isTarget(n.Left) {
				return
			}
			pat := map[string]string{"startsWith": s.Value + "*", "endsWith": "*" + s.Value, "contains": "*" + s.Value + "*"}[n.Operator]
			if strings.ContainsAny(s.Value, "*?") {
				return // a literal * or ? is not a wildcard here; leave it as text
			}
			lit := &ast.StringNode{Value: pat}
			p.check(lit)
			ast.Patch(node, &ast.BinaryNode{Operator: "or", Left: &ast.BinaryNode{Operator: n.Operator, Left: n.Left, Right: n.Right},
				Right: call(fnHostGlob, &ast.StringNode{Value: pat}, &ast.IdentifierNode{Value: "target"})})
		case "in", "not in":
			arr, ok := n.Right.(*ast.ArrayNode)
			if !ok || !isTarget(n.Left) {
				return
			}
			for _, e := range arr.Nodes {
				p.check(e)
			}
			c := call(fnTargetIn, n.Left, n.Right)
			if n.Operator == "not in" {
				c = &ast.UnaryNode{Operator: "not", Node: c}
			}
			ast.Patch(node, c)
		}
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok || id.Value != "glob" || len(n.Arguments) != 2 || !isTarget(n.Arguments[1]) {
			return
		}
		p.check(n.Arguments[0])
		ast.Patch(node, call(fnGlobTarget, n.Arguments[0], n.Arguments[1]))
	}
}
