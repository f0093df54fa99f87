// Package acceptance proves the jail's properties from inside it: lever acceptance. The
// check definitions are pure (Evaluate: measurements in, verdicts out); Run gathers the
// measurements through the guest Runner (one call for the egress snapshot and every
// network probe, process inspection and secret scan) and the podman bindings.
//
// It only measures and judges: it must not change the jail (no rule applied, no container
// started) nor hold the checks' verdicts anywhere but in its result.
package acceptance

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/guestside/probes"
)

// Status is a check's verdict.
type Status string

const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	NA   Status = "N/A"
)

// LimitsNA is the limits check's verdict text on the development substrate.
const LimitsNA = "not applicable to a development substrate (rootless cgroup v1 cannot enforce pids/memory)"

// Result is one check's verdict.
type Result struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// Targets are the addresses that stand for the outside world. A real jail uses the
// defaults; tests point each at an address in a namespace they made.
type Targets struct {
	Metadata  string `json:"metadata"`   // the cloud metadata address: REJECTed
	LinkLocal string `json:"link_local"` // a neighbouring link-local address: DROPped
	LAN       string `json:"lan"`        // a private-range address standing for the LAN
	Internet  string `json:"internet"`   // an address standing for the public internet
	DNS       string `json:"dns"`        // a resolver standing for public DNS
	// AliasV6 is the IPv6 address the alias-v6 check judges and probes; empty means the
	// address the host alias resolves to in the guest (the real case).
	AliasV6 string `json:"alias_v6,omitempty"`
}

// DefaultTargets are the real-world targets.
func DefaultTargets() Targets {
	return Targets{
		Metadata:  "169.254.169.254:80",
		LinkLocal: "169.254.169.253:80",
		LAN:       "192.168.1.1:80",
		Internet:  "1.1.1.1:443",
		DNS:       "1.1.1.1:53",
	}
}

// Expect is what the configuration says should hold.
type Expect struct {
	Closed     bool
	AliasIP    string
	AllowPorts []int
	AdminPort  int
	BrokerAddr string // alias IP and jail port the broker serves on
	PidsLimit  int64
	MemoryMax  int64
	// DevSubstrate: the netns substrate (shares the host's kernel and filesystem).
	DevSubstrate bool
	Targets      Targets

	// AliasV6 is the host alias's IPv6 address as the guest resolves it ("" for none);
	// AliasV6Covered says the desired IPv6 chain drops it after the allowlisted ports.
	AliasV6        string
	AliasV6Covered bool
}

// Measured is everything Run gathered.
type Measured struct {
	EgressMatch bool
	EgressDiff  []string
	EgressErr   string
	Outcomes    map[string]Outcome
	Procs       []ProcInfo
	Containers  []ContainerInfo
	ScanHits    []string
	Scanned     int
	// ScannedBytes is what the search read (files and logs); ScanMS how long the guest's
	// search took; ScanScope what it covered, in words.
	ScannedBytes int64
	ScanMS       int64
	// RootOnlyFiles/RootOnlyBytes: files in root-only package trees left unread
	// (probes.Scan.RootOnly).
	RootOnlyFiles int
	RootOnlyBytes int64
	// RootOnlyTrees are the trees those were in (RootOnlyTrees when not set).
	RootOnlyTrees []string
	// OverCap is how many files the search left unread because they hold more data than
	// its per-file cap (a sparse file's holes do not count). Any is a failure: the key
	// could be in one.
	OverCap int
	// Changed is how many files the search listed but did not read because, by the time
	// a reader opened them, they were gone or no longer a regular file (probes.Stats). It
	// is reported, not failed: a live guest deletes files during any search.
	Changed    int
	ScanScope  string
	ScanErr    string
	LogHits    []string
	EnvHits    []string
	WholeGuest bool // the scan covered the whole guest filesystem
}

// ContainerInfo is what the podman side reports per container.
type ContainerInfo struct {
	Name    string
	Running bool
	Pid     int
	EffCaps []string
	CapAdd  []string
}

// ProbesFor is the network probe set the checks need.
func ProbesFor(e Expect, caPEM []byte) []Probe {
	ps := []Probe{
		{ID: "metadata", Kind: "tcp", Addr: e.Targets.Metadata, TimeoutMS: 1500},
		{ID: "linklocal", Kind: "tcp", Addr: e.Targets.LinkLocal, TimeoutMS: 1500},
		{ID: "lan", Kind: "tcp", Addr: e.Targets.LAN, TimeoutMS: 1500},
		{ID: "loopback", Kind: "loopback", TimeoutMS: 1500},
	}
	for _, p := range e.AllowPorts {
		ps = append(ps, Probe{ID: "alias:" + strconv.Itoa(p), Kind: "tcp", Addr: net.JoinHostPort(e.AliasIP, strconv.Itoa(p)), TimeoutMS: 1500})
	}
	if e.AdminPort != 0 {
		ps = append(ps, Probe{ID: "admin", Kind: "tcp", Addr: net.JoinHostPort(e.AliasIP, strconv.Itoa(e.AdminPort)), TimeoutMS: 1500})
	}
	if e.BrokerAddr != "" && len(caPEM) > 0 {
		ps = append(ps, Probe{ID: "broker-tls", Kind: "tls", Addr: e.BrokerAddr, CAPEM: string(caPEM), TimeoutMS: 3000})
	}
	if a6, global := aliasV6(e); global {
		ps = append(ps, Probe{ID: "alias6", Kind: "tcp", Addr: net.JoinHostPort(a6.String(), strconv.Itoa(closedPort(e))), TimeoutMS: 1500})
	} else if e.AliasV6 == probes.Alias6 && e.Targets.AliasV6 == "" {
		// Not known yet: the guest aims it at the alias its snapshot finds, and keeps it
		// only when that is global (probes.Aim).
		ps = append(ps, Probe{ID: "alias6", Kind: "tcp", Addr: net.JoinHostPort(probes.Alias6, strconv.Itoa(closedPort(e))), TimeoutMS: 1500})
	}
	if e.Closed {
		ps = append(ps,
			Probe{ID: "dns", Kind: "udp-dns", Addr: e.Targets.DNS, TimeoutMS: 1500},
			Probe{ID: "internet", Kind: "tcp", Addr: e.Targets.Internet, TimeoutMS: 1500})
	}
	return ps
}

// aliasV6 is the IPv6 alias address the check judges, and whether it is global scope: a
// global unicast address outside the unique-local range fc00::/7 (which, like link-local,
// never leaves the host's own networks).
func aliasV6(e Expect) (netip.Addr, bool) {
	s := e.AliasV6
	if e.Targets.AliasV6 != "" {
		s = e.Targets.AliasV6
	}
	return probes.GlobalV6(s)
}

// closedPort is a port the alias-v6 probe uses: not allowlisted, so LEVER_EGRESS must drop it.
func closedPort(e Expect) int {
	for p := 9; ; p++ {
		allowed := false
		for _, a := range e.AllowPorts {
			allowed = allowed || a == p
		}
		if !allowed {
			return p
		}
	}
}

// dropped: a DROP shows as a timeout. Anything else (an answer, a refusal, a missing
// route) means the firewall was not what stopped it, or did not stop it.
func dropped(o Outcome, what string) (Status, string) {
	switch o.Result {
	case "timeout":
		return Pass, fmt.Sprintf("%s: no answer within %.0f ms (dropped)", what, o.ElapsedMS)
	case "netunreach":
		return Fail, fmt.Sprintf("%s: no route (%s): the firewall was not exercised; give the jail a route to it", what, o.Detail)
	case "":
		return Fail, what + ": not measured"
	}
	return Fail, fmt.Sprintf("%s: %s after %.1f ms (%s), want dropped", what, o.Result, o.ElapsedMS, o.Detail)
}

// Evaluate turns measurements into verdicts. It is pure.
func Evaluate(e Expect, m Measured) []Result {
	var rs []Result
	add := func(id, title string, s Status, d string) {
		rs = append(rs, Result{ID: id, Title: title, Status: s, Detail: d})
	}
	o := func(id string) Outcome { return m.Outcomes[id] }

	// 1. the live chains are exactly the desired ruleset, both families
	switch {
	case m.EgressErr != "":
		add("egress-chains", "LEVER_EGRESS matches the desired ruleset (IPv4 and IPv6)", Fail, m.EgressErr)
	case m.EgressMatch:
		add("egress-chains", "LEVER_EGRESS matches the desired ruleset (IPv4 and IPv6)", Pass, "both families match rule for rule, jump first and unique in OUTPUT")
	default:
		add("egress-chains", "LEVER_EGRESS matches the desired ruleset (IPv4 and IPv6)", Fail, strings.Join(m.EgressDiff, "; "))
	}

	// 2. metadata answers "no route to host" at once; its neighbour is dropped
	md := o("metadata")
	switch {
	case md.Result == "hostunreach" && md.ElapsedMS < 500:
		add("metadata-reject", "metadata address answers \"no route to host\" at once", Pass, fmt.Sprintf("%s: EHOSTUNREACH in %.2f ms", e.Targets.Metadata, md.ElapsedMS))
	default:
		add("metadata-reject", "metadata address answers \"no route to host\" at once", Fail, fmt.Sprintf("%s: %s after %.1f ms (%s)", e.Targets.Metadata, md.Result, md.ElapsedMS, md.Detail))
	}
	s, d := dropped(o("linklocal"), e.Targets.LinkLocal)
	add("linklocal-drop", "a neighbouring link-local address is dropped", s, d)

	// 3. a private-range address is dropped
	s, d = dropped(o("lan"), e.Targets.LAN)
	add("private-drop", "a private-range (LAN) address is dropped", s, d)

	// 3b. the host alias resolves to no global-scope IPv6 address, or LEVER_EGRESS covers it
	const v6title = "the host alias resolves to no global-scope IPv6 address, or LEVER_EGRESS covers it"
	switch a6, global := aliasV6(e); {
	case !a6.IsValid() && m.EgressErr != "":
		add("alias-v6", v6title, Fail, "the guest's resolution of the alias was not read: "+m.EgressErr)
	case !a6.IsValid():
		add("alias-v6", v6title, Pass, "the host alias resolves to no IPv6 address")
	case !global:
		add("alias-v6", v6title, Pass, a6.String()+" is not a global-scope address (unique-local or link-local)")
	default:
		s, d := dropped(o("alias6"), net.JoinHostPort(a6.String(), strconv.Itoa(closedPort(e))))
		switch {
		case !e.AliasV6Covered:
			add("alias-v6", v6title, Fail, fmt.Sprintf("%s is global scope and the desired IPv6 chain does not drop it; %s", a6, d))
		case s != Pass:
			add("alias-v6", v6title, Fail, fmt.Sprintf("%s is global scope and not covered by LEVER_EGRESS: %s", a6, d))
		default:
			add("alias-v6", v6title, Pass, fmt.Sprintf("%s is global scope; LEVER_EGRESS covers it: %s", a6, d))
		}
	}

	// 4. allowlisted alias ports reachable, admin port not
	var bad, good []string
	for _, p := range e.AllowPorts {
		r := o("alias:" + strconv.Itoa(p))
		if r.Result == "connected" || r.Result == "refused" {
			good = append(good, fmt.Sprintf("%d %s", p, r.Result))
		} else {
			bad = append(bad, fmt.Sprintf("%d %s (%s)", p, r.Result, r.Detail))
		}
	}
	switch {
	case len(e.AllowPorts) == 0:
		add("alias-ports", "each allowlisted alias port is reachable", NA, "manager.allow_ports is empty")
	case len(bad) == 0:
		add("alias-ports", "each allowlisted alias port is reachable", Pass, e.AliasIP+": "+strings.Join(good, ", "))
	default:
		add("alias-ports", "each allowlisted alias port is reachable", Fail, e.AliasIP+": unreachable: "+strings.Join(bad, ", "))
	}
	if e.AdminPort != 0 {
		s, d = dropped(o("admin"), net.JoinHostPort(e.AliasIP, strconv.Itoa(e.AdminPort)))
		add("admin-port", "the broker's admin port is not reachable from the jail", s, d)
	}

	// 5. broker certificate validates by IP; no client certificate, no service
	if e.BrokerAddr != "" {
		bt := o("broker-tls")
		switch {
		case bt.Result == "refused-no-client-cert" && bt.CertValid:
			add("broker-tls", "broker certificate validates by IP; a client without a certificate is refused", Pass, fmt.Sprintf("%s: server certificate valid for the IP; without a client certificate: %s", e.BrokerAddr, bt.Detail))
		default:
			add("broker-tls", "broker certificate validates by IP; a client without a certificate is refused", Fail, fmt.Sprintf("%s: %s (%s)", e.BrokerAddr, bt.Result, bt.Detail))
		}
	}

	// 6. closed posture: DNS and the internet unreachable, loopback works
	lo := o("loopback")
	if e.Closed {
		dn := o("dns")
		if dn.Result == "answered" {
			add("closed-dns", "closed posture: DNS is unreachable", Fail, fmt.Sprintf("%s answered (%s)", e.Targets.DNS, dn.Detail))
		} else if dn.Result == "timeout" || dn.Result == "eacces" {
			add("closed-dns", "closed posture: DNS is unreachable", Pass, fmt.Sprintf("%s: %s after %.0f ms", e.Targets.DNS, dn.Result, dn.ElapsedMS))
		} else {
			add("closed-dns", "closed posture: DNS is unreachable", Fail, fmt.Sprintf("%s: %s (%s): not stopped by the firewall", e.Targets.DNS, dn.Result, dn.Detail))
		}
		s, d = dropped(o("internet"), e.Targets.Internet)
		add("closed-internet", "closed posture: the public internet is unreachable", s, d)
	} else {
		add("closed-dns", "closed posture: DNS is unreachable", NA, "egress is open")
		add("closed-internet", "closed posture: the public internet is unreachable", NA, "egress is open")
	}
	if lo.Result == "connected" {
		add("loopback", "loopback works", Pass, lo.Detail)
	} else {
		add("loopback", "loopback works", Fail, lo.Result+" "+lo.Detail)
	}

	// 7. containers rootless, lev without capabilities, limits in force
	rs = append(rs, containerChecks(e, m)...)

	// 8. no API key anywhere in the guest
	var where []string
	where = append(where, m.ScanHits...)
	where = append(where, m.EnvHits...)
	where = append(where, m.LogHits...)
	scope := m.ScanScope
	if scope == "" {
		scope = "lev's filesystem view, environment and logs"
	}
	switch {
	case m.ScanErr != "":
		add("no-api-key", "no API key is readable in the guest", Fail, "scan failed: "+m.ScanErr)
	case len(where) > 0:
		add("no-api-key", "no API key is readable in the guest", Fail, "found in: "+strings.Join(where, ", "))
	case m.Scanned == 0:
		add("no-api-key", "no API key is readable in the guest", Fail, "nothing was scanned")
	case m.OverCap > 0:
		add("no-api-key", "no API key is readable in the guest", Fail, fmt.Sprintf("%d files holding more data than the search's %d MiB per-file cap were not searched: the key could be in them", m.OverCap, ScanMaxMiB))
	default:
		d := fmt.Sprintf("searched %s (%d files, %s in %.1f s): not found", scope, m.Scanned, humanBytes(m.ScannedBytes), float64(m.ScanMS)/1000)
		if m.RootOnlyFiles > 0 {
			trees := m.RootOnlyTrees
			if len(trees) == 0 {
				trees = RootOnlyTrees
			}
			d += fmt.Sprintf("; %d files (%s) in root-only package trees (%s) not read: only root can write them", m.RootOnlyFiles, humanBytes(m.RootOnlyBytes), strings.Join(trees, ", "))
		}
		if m.Changed > 0 {
			d += fmt.Sprintf("; %d files gone or no longer regular files when read (not read)", m.Changed)
		}
		if !m.WholeGuest {
			d += "; the development substrate shares the host's filesystem, so the whole-guest search does not apply"
		}
		add("no-api-key", "no API key is readable in the guest", Pass, d)
	}
	return rs
}

func containerChecks(e Expect, m Measured) []Result {
	var rs []Result
	add := func(id, title string, s Status, d string) {
		rs = append(rs, Result{ID: id, Title: title, Status: s, Detail: d})
	}
	if len(m.Containers) == 0 {
		add("containers-rootless", "containers are rootless and lev has no capabilities", Fail, "no lev container found")
		add("container-limits", "lev's pids and memory limits are in force", Fail, "no lev container found")
		return rs
	}
	var bad, good []string
	procs := map[int]ProcInfo{}
	for _, p := range m.Procs {
		procs[p.Pid] = p
	}
	for _, c := range m.Containers {
		if !c.Running {
			bad = append(bad, c.Name+" is not running")
			continue
		}
		p, ok := procs[c.Pid]
		switch {
		case !ok || p.Err != "":
			bad = append(bad, fmt.Sprintf("%s: process %d not inspected (%s)", c.Name, c.Pid, p.Err))
		case strings.HasPrefix(p.Uid, "0 ") || p.Uid == "":
			bad = append(bad, fmt.Sprintf("%s runs as uid %q in the guest (rootful)", c.Name, p.Uid))
		case p.CapEff != "0000000000000000" || p.CapBnd != "0000000000000000":
			bad = append(bad, fmt.Sprintf("%s has capabilities (CapEff %s, CapBnd %s)", c.Name, p.CapEff, p.CapBnd))
		case len(c.EffCaps) > 0 || len(c.CapAdd) > 0:
			bad = append(bad, fmt.Sprintf("%s: podman reports capabilities %v %v", c.Name, c.EffCaps, c.CapAdd))
		case p.NoNewPrivs != "1":
			bad = append(bad, c.Name+": no_new_privs is not set")
		case !isNetNS(p.NetNS) || !isNetNS(p.JailNetNS):
			// Two unread namespaces compare equal: never judge them.
			bad = append(bad, fmt.Sprintf("%s: network namespace not read (container %q, jail %q)", c.Name, p.NetNS, p.JailNetNS))
		case p.NetNS != p.JailNetNS:
			bad = append(bad, fmt.Sprintf("%s is in network namespace %s, not the jail's %s", c.Name, p.NetNS, p.JailNetNS))
		default:
			good = append(good, fmt.Sprintf("%s: guest uid %s, CapEff 0, CapBnd 0, no_new_privs, jail netns", c.Name, strings.Fields(p.Uid)[0]))
		}
	}
	if len(bad) > 0 {
		add("containers-rootless", "containers are rootless and lev has no capabilities", Fail, strings.Join(bad, "; "))
	} else {
		add("containers-rootless", "containers are rootless and lev has no capabilities", Pass, strings.Join(good, "; "))
	}

	var lbad, lgood []string
	allV1 := true
	for _, c := range m.Containers {
		p := procs[c.Pid]
		if p.Cgroup != "v1" {
			allV1 = false
		}
		wantP, wantM := strconv.FormatInt(e.PidsLimit, 10), strconv.FormatInt(e.MemoryMax, 10)
		if p.PidsMax == wantP && p.MemoryMax == wantM {
			lgood = append(lgood, fmt.Sprintf("%s: pids.max %s, memory.max %s", c.Name, p.PidsMax, p.MemoryMax))
		} else {
			lbad = append(lbad, fmt.Sprintf("%s: pids.max %q (want %s), memory.max %q (want %s), cgroup %s", c.Name, p.PidsMax, wantP, p.MemoryMax, wantM, p.Cgroup))
		}
	}
	switch {
	case len(lbad) == 0:
		add("container-limits", "lev's pids and memory limits are in force", Pass, strings.Join(lgood, "; "))
	case e.DevSubstrate && allV1:
		add("container-limits", "lev's pids and memory limits are in force", NA, LimitsNA+": "+strings.Join(lbad, "; "))
	default:
		add("container-limits", "lev's pids and memory limits are in force", Fail, strings.Join(lbad, "; "))
	}
	return rs
}

// isNetNS reports whether s is a network namespace as /proc/PID/ns/net reads: net:[inode].
func isNetNS(s string) bool {
	in, ok := strings.CutPrefix(s, "net:[")
	in, ok2 := strings.CutSuffix(in, "]")
	if !ok || !ok2 || in == "" {
		return false
	}
	_, err := strconv.ParseUint(in, 10, 64)
	return err == nil
}

// humanBytes is n in the largest binary unit that keeps it at least 1.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// ScanMaxMiB is the key search's per-file read cap, on the data a file holds (a sparse
// file's holes are not read). A file over it is not read, and no-api-key fails rather
// than pass without it (see Measured.OverCap).
const ScanMaxMiB = 256
