package lima

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/guest"
)

var _ backend.Containment = (*Lima)(nil)

// intent renders and validates lever's template for this instance: what the drift check
// compares the realized config with. It writes nothing.
func (l *Lima) intent() (Intent, []byte, error) {
	p, err := ParamsFor(l.cfg, l.plat)
	if err != nil {
		return Intent{}, nil, err
	}
	rendered, err := Render(p)
	if err != nil {
		return Intent{}, nil, err
	}
	y, err := Validate(rendered)
	if err != nil {
		return Intent{}, nil, err
	}
	return IntentOf(p, y), rendered, nil
}

// CheckHost is the warm path's host half: the VM is listed, running, and its realized
// config (limactl list --json) holds nothing the template did not ask for.
func (l *Lima) CheckHost(ctx context.Context) error {
	if err := refuseRoot(); err != nil {
		return err
	}
	in, _, err := l.intent()
	if err != nil {
		return err
	}
	inst, err := l.list(ctx)
	if err != nil {
		return err
	}
	if inst == nil {
		return fmt.Errorf("lima VM %s is not listed by limactl (the guest answered, but it is not lever's VM)", l.vm)
	}
	if d := Drift(in, inst.Config); len(d) > 0 {
		return &DriftError{VM: l.vm, Differences: d}
	}
	if inst.Status != "Running" {
		return fmt.Errorf("lima VM %s is %s", l.vm, inst.Status)
	}
	return nil
}

// containmentScript prints every mount, whether /dev/kvm is a character device, and the
// userns sysctl. Read-only. GatherFacts runs the same part.
//
//go:embed scripts/containment.sh
var containmentScript string

// GuestCheck implements backend.Containment.
func (l *Lima) GuestCheck() string { return containmentScript }

// hostBacked are the filesystem types through which a host directory reaches the guest.
var hostBacked = map[string]bool{"fuse.sshfs": true, "9p": true, "virtiofs": true}

// CheckGuest implements backend.Containment: exactly one mount at /lever, the template's
// type, writable, from the tree; no other host-backed mount anywhere; /dev/kvm exactly
// when nested_virt is on.
func (l *Lima) CheckGuest(secs guest.Sections) error {
	tree := ""
	if p, err := ParamsFor(l.cfg, l.plat); err == nil {
		tree = p.Tree
	}
	return checkContainment(secs, l.plat.GuestFSType, tree, l.cfg.NestedVirt)
}

func checkContainment(secs guest.Sections, wantFSType, tree string, nestedVirt bool) error {
	c, err := readContainment(secs)
	if err != nil {
		return fmt.Errorf("lima guest containment check: %w", err)
	}
	var problems []string
	var atTree []string
	for _, m := range c.mounts {
		if m.Target == MountPoint {
			atTree = append(atTree, m.FSType)
			switch {
			case m.FSType != wantFSType:
				problems = append(problems, fmt.Sprintf("%s is %s, expected %s", MountPoint, m.FSType, wantFSType))
			case !m.HasOption("rw"):
				problems = append(problems, fmt.Sprintf("%s is not writable (options %s)", MountPoint, m.Options))
			case tree != "" && strings.TrimPrefix(m.Source, ":") != tree:
				problems = append(problems, fmt.Sprintf("%s comes from %s, not the tree %s", MountPoint, m.Source, tree))
			}
			continue
		}
		if hostBacked[m.FSType] {
			problems = append(problems, fmt.Sprintf("a second host-backed mount: %s (%s from %s); only the tree at %s is allowed", m.Target, m.FSType, m.Source, MountPoint))
		}
	}
	kvm, userns := c.kvm, c.userns
	switch len(atTree) {
	case 0:
		problems = append([]string{MountPoint + " is not mounted in the guest"}, problems...)
	case 1:
	default:
		problems = append(problems, fmt.Sprintf("%d mounts are stacked at %s (%s); the tree must be the only one", len(atTree), MountPoint, strings.Join(atTree, ", ")))
	}
	if userns != "1" && userns != "absent" {
		problems = append(problems, fmt.Sprintf("kernel.unprivileged_userns_clone is %q, rootless podman needs 1", userns))
	}
	if nestedVirt && !kvm {
		problems = append(problems, "nested_virt is on but the guest has no /dev/kvm")
	}
	if !nestedVirt && kvm {
		problems = append(problems, "nested_virt is off but the guest has /dev/kvm (the CPU model exposes VMX/SVM)")
	}
	if len(problems) > 0 {
		return fmt.Errorf("lima guest containment drifted: %s", strings.Join(problems, "; "))
	}
	return nil
}

// containment is what the containment part found.
type containment struct {
	mounts []backend.Mount
	kvm    bool   // /dev/kvm is a character device
	userns string // kernel.unprivileged_userns_clone ("absent" on kernels without it)
}

// readContainment reads the sections scripts/containment.sh prints; a section missing or
// failed is an error (a check that did not run proves nothing).
func readContainment(secs guest.Sections) (containment, error) {
	var c containment
	out, err := secs.OK(guest.ContainmentPrefix + "mounts")
	if err != nil {
		return c, err
	}
	c.mounts = backend.ParseMounts(out)
	kvm, err := secs.OK(guest.ContainmentPrefix + "kvm")
	if err != nil {
		return c, err
	}
	switch kvm = strings.TrimSpace(kvm); kvm {
	case "yes", "no":
		c.kvm = kvm == "yes"
	default:
		return c, fmt.Errorf("section %q says %q, not yes or no", guest.ContainmentPrefix+"kvm", kvm)
	}
	if c.userns, err = secs.OK(guest.ContainmentPrefix + "userns"); err != nil {
		return c, err
	}
	c.userns = strings.TrimSpace(c.userns)
	return c, nil
}
