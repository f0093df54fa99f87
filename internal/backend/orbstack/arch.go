package orbstack

import (
	"context"
	"fmt"

	"github.com/lever-jail/lever/internal/backend"
)

// GuestArch implements backend.ArchReporter: the machine's architecture in GOARCH
// spelling, from the `image.arch` field of its record in `orb list --format json` (one orb
// call, no guest call), or for a machine not created yet the --arch lever will create it with. OrbStack spells machine architectures as Go does (`arm64` on Apple
// silicon, `amd64` for Intel Macs and `orb create --arch amd64`), so anything else is
// refused rather than guessed: it chooses which Linux binary lever sends into the machine.
func (b *Backend) GuestArch(ctx context.Context) (string, error) {
	rec, err := b.lookup(ctx)
	if err != nil {
		return "", err
	}
	if rec == nil {
		// Not created yet: bring-up chooses lev before EnsureUp creates the machine, and
		// CreateArgv names this architecture, so the machine will be exactly this.
		return b.o.Arch, nil
	}
	switch a := rec.Image.Arch; a {
	case "arm64", "amd64":
		return a, nil
	case "":
		return "", fmt.Errorf("orb list does not report machine %s's architecture (image.arch)", b.o.Machine)
	default:
		return "", fmt.Errorf("machine %s has architecture %q; lever ships Linux helpers for arm64 and amd64 only", b.o.Machine, a)
	}
}

var _ backend.ArchReporter = (*Backend)(nil)
