package lima

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

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

// checkScript prints one tagged line per fact. It only reads; it runs as root because the
// nat table needs it.
const checkScript = `m=$(findmnt -n -o FSTYPE,OPTIONS,SOURCE --mountpoint ` + MountPoint + ` 2>/dev/null | head -n1)
echo "mount ${m:-none}"
echo "userns $(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo absent)"
echo "alias $(getent ahostsv4 ` + HostAlias + ` | awk 'NR==1{print $1}')"
if [ -c /dev/kvm ]; then echo "kvm yes"; else echo "kvm no"; fi
iptables -w -t nat -S LIMADNS 2>/dev/null | sed 's/^/limadns /'
true`

// GatherFacts makes the single bring-up round-trip.
func GatherFacts(ctx context.Context, r guest.Runner) (Facts, error) {
	res, err := guest.RunOK(ctx, r, guest.Cmd{As: guest.Root, Argv: []string{"/bin/bash", "-c", checkScript}})
	if err != nil {
		return Facts{}, fmt.Errorf("reading guest state: %w", err)
	}
	return ParseFacts(string(res.Stdout))
}

// ParseFacts reads checkScript's output.
func ParseFacts(out string) (Facts, error) {
	var f Facts
	var nat strings.Builder
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		tag, rest, _ := strings.Cut(sc.Text(), " ")
		switch tag {
		case "mount":
			if rest != "none" {
				fs := strings.Fields(rest)
				if len(fs) >= 2 {
					f.MountFSType, f.MountOptions = fs[0], fs[1]
				}
				if len(fs) >= 3 {
					f.MountSource = fs[2]
				}
			}
		case "userns":
			f.UsernsClone = rest
		case "alias":
			if rest != "" {
				a, err := netip.ParseAddr(rest)
				if err != nil {
					return f, fmt.Errorf("guest resolves %s to %q: %w", HostAlias, rest, err)
				}
				f.AliasV4 = a
			}
		case "kvm":
			f.KVM = rest == "yes"
		case "limadns":
			nat.WriteString(rest + "\n")
		}
	}
	dns, err := ParseLimaDNS(nat.String())
	if err != nil {
		return f, err
	}
	f.DNS = dns
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
	case !hasOpt(f.MountOptions, "rw"):
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

func hasOpt(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o {
			return true
		}
	}
	return false
}
