package netns

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/guest"
)

var _ backend.Containment = (*Backend)(nil)

// CheckHost: the substrate has no host-side configuration to drift (the namespace's
// existence is what the runner checks on every call).
func (b *Backend) CheckHost(context.Context) error { return nil }

// guestCheck prints the namespace's default routes, per family. Read-only.
//
//go:embed scripts/containment.sh
var guestCheck string

// GuestCheck implements backend.Containment.
func (b *Backend) GuestCheck() string { return guestCheck }

// CheckGuest implements backend.Containment. The substrate's contract (see EnsureUp) is a
// namespace with no default route: it reaches the alias's /30 and /64 and nothing else
// unless someone adds routes. A default route is drift.
func (b *Backend) CheckGuest(secs guest.Sections) error {
	var problems []string
	for _, name := range []string{guest.ContainmentPrefix + "route4", guest.ContainmentPrefix + "route6"} {
		out, err := secs.OK(name)
		if err != nil {
			return fmt.Errorf("netns containment check: %w", err)
		}
		for _, l := range strings.Split(out, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				problems = append(problems, fmt.Sprintf("default route %q", l))
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("namespace %s containment drifted: it has a %s (the substrate has none)", b.ns, strings.Join(problems, " and a "))
	}
	return nil
}
