// Package taint labels context regions by sensitivity and gates outbound tools.
package taint

import "fmt"

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

// ParseLevel reads a level name, case-insensitively.
func ParseLevel(s string) (Level, error) {
	switch s {
	case "public", "Public", "PUBLIC":
		return Public, nil
	case "internal", "Internal", "INTERNAL":
		return Internal, nil
	case "private", "Private", "PRIVATE":
		return Private, nil
	}
	return 0, fmt.Errorf("unknown sensitivity %q (want public, internal or private)", s)
}
