package bringup

import (
	"io"

	"github.com/lever-jail/lever/internal/hostterm"
)

// isTerminal reports whether w is a terminal (progress then redraws each step's line). The
// platform-specific termios query lives behind internal/hostterm's build-tagged seam, so
// this package builds for macOS too.
func isTerminal(w io.Writer) bool { return hostterm.IsTerminal(w) }
