// Package taint labels context regions by sensitivity and gates outbound tools.
//
// The runtime alone assigns labels: an entry's level comes from where the runtime got the
// bytes (a read through a granted path, a web page, the user's task), never from anything a
// model wrote, so an agent cannot relabel its own data.
//
// It owns the levels, the tool classification and the gate's decision (Gate.Check). It
// must not take a label from anything a model wrote, and does not know the pipeline:
// taintgate plugs it in.
package taint

import (
	"fmt"
	"strings"
)

// Level is a sensitivity label. Only the runtime assigns it; model output never can.
type Level int

const (
	Public Level = iota
	Internal
	Private
)

func (l Level) String() string {
	switch l {
	case Public:
		return "public"
	case Internal:
		return "internal"
	case Private:
		return "private"
	}
	return fmt.Sprintf("level(%d)", int(l))
}

// Valid reports whether l is one of the three labels.
func (l Level) Valid() bool { return l >= Public && l <= Private }

// ParseLevel reads a level name, case-insensitively.
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "public":
		return Public, nil
	case "internal":
		return Internal, nil
	case "private":
		return Private, nil
	}
	return 0, fmt.Errorf("unknown sensitivity %q (want public, internal or private)", s)
}

// MarshalText writes the level's name, so audit records and policy files read as words.
func (l Level) MarshalText() ([]byte, error) {
	if !l.Valid() {
		return nil, fmt.Errorf("invalid sensitivity %d", int(l))
	}
	return []byte(l.String()), nil
}

// UnmarshalText reads a level name.
func (l *Level) UnmarshalText(b []byte) error {
	v, err := ParseLevel(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Max returns the more sensitive of a and b.
func Max(a, b Level) Level {
	if a > b {
		return a
	}
	return b
}
