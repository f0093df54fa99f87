package lima

import (
	"bufio"
	"context"
	"fmt"
	"strings"

	"github.com/lever-jail/lever/internal/backend"
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

// containmentScript prints every mount (findmnt -r escapes blanks), whether /dev/kvm is a
// character device, and the userns sysctl. Read-only.
const containmentScript = `findmnt -rn -o TARGET,FSTYPE,OPTIONS,SOURCE | sed 's/^/mnt /'
if [ -c /dev/kvm ]; then echo "kvm yes"; else echo "kvm no"; fi
echo "userns $(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo absent)"`

// GuestCheck implements backend.Containment.
func (l *Lima) GuestCheck() string { return containmentScript }

// hostBacked are the filesystem types through which a host directory reaches the guest.
var hostBacked = map[string]bool{"fuse.sshfs": true, "9p": true, "virtiofs": true}

// CheckGuest implements backend.Containment: exactly one mount at /lever, the template's
// type, writable, from the tree; no other host-backed mount anywhere; /dev/kvm exactly
// when nested_virt is on.
func (l *Lima) CheckGuest(out string, rc int) error {
	tree := ""
	if p, err := ParamsFor(l.cfg, l.plat); err == nil {
		tree = p.Tree
	}
	return checkContainment(out, rc, l.plat.GuestFSType, tree, l.cfg.NestedVirt)
}

func checkContainment(out string, rc int, wantFSType, tree string, nestedVirt bool) error {
	if rc != 0 {
		return fmt.Errorf("lima guest containment check exited %d: %s", rc, strings.TrimSpace(out))
	}
	var problems []string
	var atTree []string
	kvm, userns := "", ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		tag, rest, _ := strings.Cut(sc.Text(), " ")
		switch tag {
		case "mnt":
			f := strings.Fields(rest)
			if len(f) < 3 {
				continue
			}
			target, fstype, opts, src := unescape(f[0]), f[1], f[2], ""
			if len(f) > 3 {
				src = unescape(f[3])
			}
			if target == MountPoint {
				atTree = append(atTree, fstype)
				switch {
				case fstype != wantFSType:
					problems = append(problems, fmt.Sprintf("%s is %s, expected %s", MountPoint, fstype, wantFSType))
				case !hasOpt(opts, "rw"):
					problems = append(problems, fmt.Sprintf("%s is not writable (options %s)", MountPoint, opts))
				case tree != "" && strings.TrimPrefix(src, ":") != tree:
					problems = append(problems, fmt.Sprintf("%s comes from %s, not the tree %s", MountPoint, src, tree))
				}
				continue
			}
			if hostBacked[fstype] {
				problems = append(problems, fmt.Sprintf("a second host-backed mount: %s (%s from %s); only the tree at %s is allowed", target, fstype, src, MountPoint))
			}
		case "kvm":
			kvm = rest
		case "userns":
			userns = rest
		}
	}
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
	if nestedVirt && kvm != "yes" {
		problems = append(problems, "nested_virt is on but the guest has no /dev/kvm")
	}
	if !nestedVirt && kvm != "no" {
		problems = append(problems, "nested_virt is off but the guest has /dev/kvm (the CPU model exposes VMX/SVM)")
	}
	if len(problems) > 0 {
		return fmt.Errorf("lima guest containment drifted: %s", strings.Join(problems, "; "))
	}
	return nil
}

// unescape undoes findmnt -r's \xNN escapes.
func unescape(s string) string {
	if !strings.Contains(s, `\x`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			var c byte
			if _, err := fmt.Sscanf(s[i+2:i+4], "%02x", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
