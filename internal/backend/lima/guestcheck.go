package lima

import (
	"context"
	_ "embed"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/backend"
	"github.com/lever-jail/lever/internal/guest"
)

// HostAlias is the name the guest resolves to reach the host (from the guest's /etc/hosts,
// written by Lima's boot scripts).
const HostAlias = "host.lima.internal"

// DNSTarget is one of the host agent resolver's DNAT targets: the guest's DNS traffic to
// 192.168.5.3:53 is rewritten by the LIMADNS nat chain to Addr:Port on the host alias.
type DNSTarget struct {
	Proto string     `json:"proto"`
	Addr  netip.Addr `json:"addr"`
	Port  int        `json:"port"`
}

// Facts is what one guest round-trip learns at bring-up.
type Facts struct {
	MountFSType  string      // fstype of /lever ("" when not mounted)
	MountOptions string      // its mount options
	MountSource  string      // its source
	UsernsClone  string      // kernel.unprivileged_userns_clone ("absent" on kernels without it)
	AliasV4      netip.Addr  // host.lima.internal as the guest resolves it
	DNS          []DNSTarget // LIMADNS DNAT targets
	KVM          bool        // /dev/kvm is a character device in the guest
}

// factsScript learns the alias and LIMADNS; it runs after containmentScript in the same
// script, whose sections say what is mounted at /lever, /dev/kvm and the userns sysctl.
//
//go:embed scripts/facts.sh
var factsScript string

// GatherFacts makes the single bring-up round-trip: the containment part and the facts
// part in one guest.Script, run as root (the nat table needs it). Read-only.
func GatherFacts(ctx context.Context, r guest.Runner) (Facts, error) {
	sc := guest.NewScript(containmentScript, factsScript)
	res, err := guest.RunOK(ctx, r, sc.Cmd(nil, HostAlias))
	if err != nil {
		return Facts{}, fmt.Errorf("reading guest state: %w", err)
	}
	secs, err := sc.Parse(res.Stdout)
	if err != nil {
		return Facts{}, fmt.Errorf("reading guest state: %w", err)
	}
	return ParseFacts(secs)
}

// carriesFacts says whether the snapshot req asks for reads everything GatherFacts would:
// this backend's containment part, the host alias and LIMADNS.
func carriesFacts(req guest.SnapshotRequest) bool {
	return req.Containment == containmentScript && req.Alias == HostAlias && req.LimaDNS
}

// gatherWithSnapshot is GatherFacts' one round trip taken by the egress snapshot req
// asks for (carriesFacts): the facts come from the snapshot's own sections (the alias from
// its getent ahostsv4, LIMADNS and the containment part as they are), and the sections are
// returned for the egress step to parse and judge.
func gatherWithSnapshot(ctx context.Context, r guest.Runner, req guest.SnapshotRequest) (guest.Sections, Facts, error) {
	sc := guest.NewScript(guest.SnapshotParts(req)...)
	res, err := guest.RunOK(ctx, r, sc.Cmd(guest.SnapshotEnv(req)))
	if err != nil {
		return nil, Facts{}, fmt.Errorf("reading guest state: %w", err)
	}
	secs, err := sc.Parse(res.Stdout)
	if err != nil {
		return nil, Facts{}, fmt.Errorf("reading guest state: %w", err)
	}
	view := guest.Sections{}
	for k, v := range secs {
		view[k] = v
	}
	// facts.sh's names: "alias" is the snapshot's alias4; "limadns" is the same in both
	view["alias"] = secs[guest.SectionAliasV4]
	if e, ok := secs[guest.SectionAliasV4+".stderr"]; ok {
		view["alias.stderr"] = e
	}
	f, err := ParseFacts(view)
	return secs, f, err
}

// ParseFacts reads GatherFacts' sections.
func ParseFacts(secs guest.Sections) (Facts, error) {
	var f Facts
	c, err := readContainment(secs)
	if err != nil {
		return f, fmt.Errorf("reading guest state: %w", err)
	}
	for _, m := range c.mounts {
		if m.Target == MountPoint {
			f.MountFSType, f.MountOptions, f.MountSource = m.FSType, m.Options, m.Source
			break
		}
	}
	f.UsernsClone, f.KVM = c.userns, c.kvm
	// getent fails (exit 2) when the name does not resolve: CheckFacts reports that.
	if sec := secs["alias"]; sec.RC == 0 {
		if fs := strings.Fields(sec.Out); len(fs) > 0 {
			a, err := netip.ParseAddr(fs[0])
			if err != nil {
				return f, fmt.Errorf("guest resolves %s to %q: %w", HostAlias, fs[0], err)
			}
			f.AliasV4 = a
		}
	}
	// No LIMADNS chain (iptables exits 1) means no DNAT targets, as before the chain exists.
	if sec := secs["limadns"]; sec.RC == 0 {
		if f.DNS, err = ParseLimaDNS(sec.Out); err != nil {
			return f, err
		}
	}
	return f, nil
}

var dnatRE = regexp.MustCompile(`-p (tcp|udp)\b.*-j DNAT --to-destination ([0-9.]+):(\d+)`)

// ParseLimaDNS reads `iptables -t nat -S LIMADNS` and returns its DNAT targets. A DNAT
// rule lever cannot read is an error, not skipped: the open posture allows exactly these.
func ParseLimaDNS(rules string) ([]DNSTarget, error) {
	var out []DNSTarget
	for _, line := range strings.Split(rules, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "-A LIMADNS") {
			continue
		}
		m := dnatRE.FindStringSubmatch(line)
		if m == nil {
			if strings.Contains(line, "DNAT") {
				return nil, fmt.Errorf("LIMADNS: cannot read DNAT rule %q", line)
			}
			continue
		}
		a, err := netip.ParseAddr(m[2])
		if err != nil {
			return nil, fmt.Errorf("LIMADNS: rule %q: %w", line, err)
		}
		p, err := strconv.Atoi(m[3])
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("LIMADNS: rule %q: bad port", line)
		}
		out = append(out, DNSTarget{Proto: m[1], Addr: a, Port: p})
	}
	return out, nil
}

// CheckFacts fails closed on a guest that does not hold what the jail needs: above all the
// tree, which a VM can report READY without (Lima mounts with nofail).
func CheckFacts(f Facts, wantFSType string, nestedVirt bool) error {
	var problems []string
	switch {
	case f.MountFSType == "":
		problems = append(problems, MountPoint+" is not mounted in the guest")
	case f.MountFSType != wantFSType:
		problems = append(problems, fmt.Sprintf("%s is %s, expected %s", MountPoint, f.MountFSType, wantFSType))
	case !(backend.Mount{Options: f.MountOptions}).HasOption("rw"):
		problems = append(problems, fmt.Sprintf("%s is not writable (options %s)", MountPoint, f.MountOptions))
	}
	if f.UsernsClone != "1" && f.UsernsClone != "absent" {
		problems = append(problems, fmt.Sprintf("kernel.unprivileged_userns_clone is %q, rootless podman needs 1", f.UsernsClone))
	}
	if !f.AliasV4.IsValid() {
		problems = append(problems, HostAlias+" does not resolve in the guest")
	}
	if nestedVirt && !f.KVM {
		problems = append(problems, "nested_virt is on but the guest has no /dev/kvm")
	}
	if !nestedVirt && f.KVM {
		problems = append(problems, "nested_virt is off but the guest has /dev/kvm (the CPU model exposes VMX/SVM)")
	}
	if len(problems) > 0 {
		return fmt.Errorf("guest check failed: %s", strings.Join(problems, "; "))
	}
	return nil
}
