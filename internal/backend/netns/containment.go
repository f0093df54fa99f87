package netns

import (
	"context"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/backend"
)

var _ backend.Containment = (*Backend)(nil)

// CheckHost: the substrate has no host-side configuration to drift (the namespace's
// existence is what the runner checks on every call).
func (b *Backend) CheckHost(context.Context) error { return nil }

// guestCheck prints the namespace's default routes, per family. Read-only.
const guestCheck = `ip -4 route show default | sed 's/^/route4 /'
ip -6 route show default | sed 's/^/route6 /'`

// GuestCheck implements backend.Containment.
func (b *Backend) GuestCheck() string { return guestCheck }

// CheckGuest implements backend.Containment. The substrate's contract (see EnsureUp) is a
// namespace with no default route: it reaches the alias's /30 and /64 and nothing else
// unless someone adds routes. A default route is drift.
func (b *Backend) CheckGuest(out string, rc int) error {
	if rc != 0 {
		return fmt.Errorf("netns containment check exited %d: %s", rc, strings.TrimSpace(out))
	}
	var problems []string
	for _, l := range strings.Split(out, "\n") {
		tag, rest, _ := strings.Cut(strings.TrimSpace(l), " ")
		if tag == "route4" || tag == "route6" {
			problems = append(problems, fmt.Sprintf("default route %q", rest))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("namespace %s containment drifted: it has a %s (the substrate has none)", b.ns, strings.Join(problems, " and a "))
	}
	return nil
}
