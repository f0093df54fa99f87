package probes

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/lever-jail/lever/internal/guest"
)

// The host alias's addresses come from the egress snapshot this same call runs, so the
// host writes them as these placeholders in a probe's host part and the guest fills them
// in (Aim).
const (
	Alias4 = "{alias4}"
	Alias6 = "{alias6}"
)

// GlobalV6 parses s and says whether it is a global-scope IPv6 address: global unicast
// outside the unique-local range fc00::/7 (which, like link-local, never leaves the host's
// own networks). Only such an alias is probed and judged.
func GlobalV6(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a, a.Is6() && !a.Is4In6() && a.IsGlobalUnicast() && !a.IsPrivate()
}

// Aim fills the alias placeholders in: Alias4 becomes v4 ("" leaves the bare ":port", as
// a probe aimed at an unknown alias always was), and a probe aimed at Alias6 is kept only
// when v6 is global (GlobalV6). The host computes the same from the snapshot's bytes and
// refuses an answer whose probes were aimed elsewhere.
func Aim(ps []Probe, v4, v6 string) []Probe {
	var out []Probe
	for _, p := range ps {
		host, port, err := net.SplitHostPort(p.Addr)
		switch {
		case err != nil:
		case host == Alias4:
			p.Addr = net.JoinHostPort(v4, port)
		case host == Alias6:
			a, global := GlobalV6(v6)
			if !global {
				continue
			}
			p.Addr = net.JoinHostPort(a.String(), port)
		}
		out = append(out, p)
	}
	return out
}

// runSnapshot runs the carried egress snapshot (as root, in the jail's network namespace,
// like the helper itself).
func runSnapshot(ctx context.Context, c *guest.CarriedSnapshot) *guest.CarriedAnswer {
	if len(c.Argv) == 0 {
		return &guest.CarriedAnswer{Err: "the carried snapshot has no command"}
	}
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Stdin = strings.NewReader(c.Stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	a := &guest.CarriedAnswer{}
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			a.Err = "running the egress snapshot: " + err.Error()
			return a
		}
		a.RC = ee.ExitCode()
	}
	a.Stdout, a.Stderr = out.String(), errb.String()
	return a
}
