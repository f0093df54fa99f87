package orbstack

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/guest"
)

var _ backend.Containment = (*Backend)(nil)

// CheckHost re-reads `orb list` on every apply and up: the machine exists, orb says it is
// isolated, and it runs. A machine whose isolation was turned off since it was created
// sees the Mac's files, so a warm bring-up refuses it just as EnsureUp does.
func (b *Backend) CheckHost(ctx context.Context) error {
	rec, err := b.lookup(ctx)
	if err != nil {
		return err
	}
	if rec == nil {
		return fmt.Errorf("machine %s is not listed by orb (the guest answered, but it is not lever's machine)", b.o.Machine)
	}
	if err := isolated(b.o.Machine, rec); err != nil {
		return err
	}
	if rec.State != "running" {
		return fmt.Errorf("machine %s is %s", b.o.Machine, rec.State)
	}
	return nil
}

func isolated(machine string, rec *machineRecord) error {
	switch {
	case rec.Config == nil || rec.Config.Isolated == nil:
		return fmt.Errorf("machine %s exists but orb list does not say whether it is isolated; lever adopts only a machine it can confirm is isolated (delete it with `lever destroy`)", machine)
	case !*rec.Config.Isolated:
		return fmt.Errorf("machine %s exists and is NOT isolated (it sees the Mac's files); lever will not adopt it: delete it with `lever destroy` and run again", machine)
	}
	return nil
}

// guestCheck lists every mount's target and type and whether the Mac's file sharing is
// visible. Read-only.
//
//go:embed scripts/containment.sh
var guestCheck string

// GuestCheck implements backend.Containment.
func (b *Backend) GuestCheck() string { return guestCheck }

// CheckGuest implements backend.Containment: exactly one mount at /lever, and no /mnt/mac.
func (b *Backend) CheckGuest(secs guest.Sections) error {
	out, err := secs.OK(guest.ContainmentPrefix + "mounts")
	if err != nil {
		return fmt.Errorf("orbstack guest containment check: %w", err)
	}
	var mounts []string
	for _, m := range backend.ParseMounts(out) {
		if m.Target == MountPoint {
			mounts = append(mounts, m.FSType)
		}
	}
	mac := strings.TrimSpace(secs[guest.ContainmentPrefix+"mac"].Out)
	var problems []string
	switch len(mounts) {
	case 0:
		problems = append(problems, MountPoint+" is not mounted in the machine")
	case 1:
	default:
		problems = append(problems, fmt.Sprintf("%d mounts are stacked at %s (%s); the tree must be the only one", len(mounts), MountPoint, strings.Join(mounts, ", ")))
	}
	if mac != "no" {
		problems = append(problems, "/mnt/mac exists: the Mac's files are shared into the machine (it is not isolated)")
	}
	if len(problems) > 0 {
		return fmt.Errorf("orbstack machine %s containment drifted: %s", b.o.Machine, strings.Join(problems, "; "))
	}
	return nil
}
