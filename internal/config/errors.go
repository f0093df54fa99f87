package config

import (
	"fmt"
	"strings"
)

// Problem is one thing wrong with a lever.yaml: where it is (file, line, dotted key) and
// what is wrong. Every problem names a line, so an editor can jump to it.
type Problem struct {
	File string
	Line int
	Key  string // dotted path, e.g. manager.allow_ports[1]; empty for whole-file problems
	Msg  string
	// Tree: the problem is in the tree's contents (a path lever.yaml names in the tree,
	// resolved through what is there now), which the agents write. lever up refuses it;
	// the commands that only read the jail's state carry on and warn (ParseState).
	Tree bool
}

func (p *Problem) Error() string {
	if p.Key == "" {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Key, p.Msg)
}

// Problems is every problem found in one load. Load reports all of them at once rather
// than making the user fix one at a time.
type Problems []*Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find an individual *Problem.
func (ps Problems) Unwrap() []error {
	out := make([]error, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out
}
