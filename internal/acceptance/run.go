package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/guestside/probes"
)

// Containers is the podman side, as acceptance needs it (bring-up adapts containers.Client).
type Containers interface {
	Containers(ctx context.Context) ([]ContainerInfo, error)
	Logs(ctx context.Context, name string) (string, error)
}

// Env is what one acceptance run works with.
type Env struct {
	Instance string
	Backend  string
	Runner   guest.Runner
	Egress   guest.EgressSpec
	Expect   Expect
	BrokerCA []byte
	// Podman opens the podman side once the guest call has said the run user's uid
	// (whose socket it is); nil: no podman side. An error means the service is down: no
	// containers, which the container checks fail.
	Podman func(ctx context.Context, runUID int) (Containers, error)
	// RunUser and ContainerPrefix find lev's containers in the guest (see
	// probes.Request.NamePrefix).
	RunUser         string
	ContainerPrefix string
	// ScanRoots are searched besides the containers on the netns substrate (where the
	// whole-guest search does not apply): the run user's home (its container storage)
	// and runtime dir.
	ScanRoots []string
	// Secrets are the values that must be nowhere in the guest (the LLM API key).
	Secrets [][]byte
	// HelperLev is the Linux lev binary for the guest's architecture: `lev __guest probe`
	// serves the guest side. HelperInPlace says the guest sees the host's filesystem
	// (netns substrate), so it runs in place instead of being sent.
	HelperLev     string
	HelperInPlace bool
	// Helper, when set, runs the helper instead (bring-up's, which may have put lev in
	// the guest's cache already); otherwise one is made from HelperLev and HelperInPlace.
	Helper *guestside.Helper
	// RootOnly are root-only trees of lever's own in a VM guest, searched like the
	// package trees (RootOnlyTrees): the default workbench's trees, made by root of the
	// guest's package files.
	RootOnly []string
}

// Report is one acceptance run.
type Report struct {
	Instance   string    `json:"instance"`
	Backend    string    `json:"backend"`
	Posture    string    `json:"posture"`
	Started    time.Time `json:"started"`
	DurationMS int64     `json:"duration_ms"`
	Passed     bool      `json:"passed"`
	Results    []Result  `json:"results"`
}

// Failed lists the failing checks' ids.
func (r *Report) Failed() []string {
	var out []string
	for _, x := range r.Results {
		if x.Status == Fail {
			out = append(out, x.ID)
		}
	}
	return out
}

// Run measures and evaluates in ONE guest call: the guest-side helper runs the egress
// snapshot, then the network probes aimed at the alias the snapshot names, finds and
// inspects lev's containers, and searches for the key. The host judges the snapshot's
// output exactly as a snapshot of its own (guest.ReadCarried, guest.VerifySnapshot) and
// refuses an answer whose probes were not aimed where that output says.
func Run(ctx context.Context, env Env) (*Report, error) {
	start := time.Now()
	var m Measured
	e := env.Expect
	carried, snapScript := guest.Carry(env.Egress)
	// The probes go out with the alias as a placeholder the helper fills in from the
	// snapshot it runs first (probes.Aim).
	aim := e
	if aim.AliasIP == "" {
		aim.AliasIP = probes.Alias4
	}
	aim.AliasV6 = probes.Alias6
	if aim.BrokerAddr != "" && strings.HasPrefix(aim.BrokerAddr, ":") {
		aim.BrokerAddr = aim.AliasIP + aim.BrokerAddr
	}
	req := Request{Probes: ProbesFor(aim, env.BrokerCA), RunUser: env.RunUser, NamePrefix: env.ContainerPrefix, Snapshot: &carried}
	var secret []byte
	if len(env.Secrets) > 0 {
		secret = env.Secrets[0]
	}
	scope := []string{"lev's containers (their whole view, environment and command lines)"}
	if len(secret) > 0 {
		sc := &Scan{Patterns: probes.Patterns(secret), MaxMiB: ScanMaxMiB}
		if e.DevSubstrate {
			// The netns guest is the host: a whole-guest search would find the key file
			// itself. Each container's whole view is searched (the tree, lev home, bench
			// and enrolment dirs are mounted in it), and the run user's storage.
			sc.Views = "whole"
			sc.Roots = append(sc.Roots, env.ScanRoots...)
			if len(env.ScanRoots) > 0 {
				scope = append(scope, strings.Join(env.ScanRoots, ", "))
			}
		} else {
			// A VM: all of it (every home, /tmp, /run, /var/tmp, container storage, the
			// tree at /lever), every process's environment and command line, and each
			// container's private memory-backed mounts, the one thing only its view has.
			sc.Views = "memory"
			sc.Roots = []string{"/", "/dev/shm"}
			sc.Prune = []string{"/proc", "/sys", "/dev"}
			sc.RootOnly = append(append([]string(nil), RootOnlyTrees...), env.RootOnly...)
			m.RootOnlyTrees = sc.RootOnly
			sc.AllProcs = true
			scope = []string{"the whole guest filesystem, every process's environment and command line, lev's containers' memory-backed mounts"}
			m.WholeGuest = true
		}
		req.Scan = sc
	}
	h := env.Helper
	if h == nil {
		h = &guestside.Helper{Lev: env.HelperLev, InPlace: env.HelperInPlace}
	}
	body, _ := json.Marshal(req)
	res, err := h.Run(ctx, env.Runner, guestside.ModeProbe, body)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("lev %s %s exited %d: %s", guestside.Command, guestside.ModeProbe, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		return nil, fmt.Errorf("running the acceptance probes in the guest: %w", err)
	}
	var resp Response
	if err := json.Unmarshal(res.Stdout, &resp); err != nil {
		return nil, fmt.Errorf("reading the guest's acceptance answer: %w (%q)", err, truncate(res.Stdout))
	}
	if resp.Snapshot == nil {
		return nil, fmt.Errorf("the guest's acceptance answer carries no egress snapshot (an older lev helper?)")
	}
	// The egress verdict, judged on the host as `lever egress verify` judges it.
	snap, err := guest.ReadCarried(snapScript, env.Egress, *resp.Snapshot)
	var rep guest.Report
	if err == nil {
		rep, err = guest.VerifySnapshot(env.Egress, snap)
	}
	if err != nil {
		m.EgressErr = err.Error()
	} else {
		m.EgressMatch = rep.Diff.Match()
		m.EgressDiff = rep.Lines
		if e.AliasIP == "" {
			e.AliasIP = rep.Desired.AliasV4
		}
		e.AliasV6 = rep.Desired.AliasV6
		if a, global := aliasV6(e); global {
			drop := "-A " + egress.Chain + " -d " + a.String() + "/128 -j DROP"
			for _, r := range rep.Desired.Ruleset.V6 {
				e.AliasV6Covered = e.AliasV6Covered || r == drop
			}
		}
	}
	if e.BrokerAddr != "" && strings.HasPrefix(e.BrokerAddr, ":") && e.AliasIP != "" {
		e.BrokerAddr = e.AliasIP + e.BrokerAddr
	}
	// The probes must be the ones the snapshot's bytes aim at (the host reads the alias
	// from them with the guest's own function): an answer aimed elsewhere is not judged.
	v4, v6 := carried.Aliases(*resp.Snapshot)
	if v4 != resp.AliasV4 || v6 != resp.AliasV6 {
		return nil, fmt.Errorf("the guest helper aimed its probes at the alias %q/%q, but the snapshot it returned names %q/%q", resp.AliasV4, resp.AliasV6, v4, v6)
	}
	if want := probes.Aim(req.Probes, v4, v6); !sameProbes(want, resp.Probed) {
		return nil, fmt.Errorf("the guest helper ran probes %s, but the snapshot it returned aims them at %s", probeList(resp.Probed), probeList(want))
	}
	m.Outcomes = map[string]Outcome{}
	for _, o := range resp.Outcomes {
		m.Outcomes[o.ID] = o
	}
	m.Procs = resp.Procs
	m.Scanned, m.ScannedBytes, m.ScanMS = resp.Scanned, resp.ScannedBytes, resp.ScanMS
	m.RootOnlyFiles, m.RootOnlyBytes = resp.RootOnlyFiles, resp.RootOnlyBytes
	m.OverCap, m.Changed = resp.Skipped, resp.Changed
	for _, h := range resp.Found {
		where := h.Where
		if h.Spelling != "raw" {
			where += " (" + h.Spelling + ")"
		}
		if strings.HasPrefix(h.Where, "environment of") || strings.HasPrefix(h.Where, "command line of") {
			m.EnvHits = append(m.EnvHits, where)
		} else {
			m.ScanHits = append(m.ScanHits, where)
		}
	}
	var pc Containers
	if env.Podman != nil && resp.RunUID >= 0 {
		pc, _ = env.Podman(ctx, resp.RunUID)
	}
	var cs []ContainerInfo
	if pc != nil {
		if cs, err = pc.Containers(ctx); err != nil {
			return nil, fmt.Errorf("listing lev containers: %w", err)
		}
	}
	m.Containers = cs
	if resp.FindErr != "" && len(cs) > 0 {
		m.ScanErr = "finding lev's containers in the guest: " + resp.FindErr
	}
	if len(secret) > 0 && pc != nil {
		scope = append(scope, "lev's logs")
		for _, c := range cs {
			logs, err := pc.Logs(ctx, c.Name)
			if err != nil {
				m.ScanErr = err.Error()
				continue
			}
			m.Scanned++
			m.ScannedBytes += int64(len(logs))
			if bytes.Contains([]byte(logs), secret) {
				m.LogHits = append(m.LogHits, "logs of "+c.Name)
			}
		}
	}
	m.ScanScope = strings.Join(scope, "; ")
	if len(secret) == 0 {
		m.ScanErr = "no API key configured to search for"
	}
	out := &Report{Instance: env.Instance, Backend: env.Backend, Posture: string(env.Egress.Posture), Started: start.UTC(),
		Results: Evaluate(e, m)}
	out.DurationMS = time.Since(start).Milliseconds()
	out.Passed = len(out.Failed()) == 0
	return out, nil
}

func sameProbes(a, b []Probe) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Kind != b[i].Kind || a[i].Addr != b[i].Addr {
			return false
		}
	}
	return true
}

func probeList(ps []Probe) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.ID+"="+p.Addr)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// Markdown renders the report for people.
func (r *Report) Markdown() string {
	var b strings.Builder
	verdict := "PASSED"
	if !r.Passed {
		verdict = "FAILED: " + strings.Join(r.Failed(), ", ")
	}
	fmt.Fprintf(&b, "# lever acceptance: %s\n\n", r.Instance)
	fmt.Fprintf(&b, "Backend `%s`, egress `%s`, %s, %d ms. **%s**\n\n", r.Backend, r.Posture, r.Started.Format(time.RFC3339), r.DurationMS, verdict)
	b.WriteString("| check | status | detail |\n|---|---|---|\n")
	for _, x := range r.Results {
		fmt.Fprintf(&b, "| %s: %s | %s | %s |\n", x.ID, x.Title, x.Status, strings.ReplaceAll(x.Detail, "|", "\\|"))
	}
	return b.String()
}

// RootOnlyTrees are the guest's package-managed trees, written only by root through the
// package manager: a whole-guest search reads in them only what a non-root user could have
// written (probes.Scan.RootOnly). /usr/local is not among them (lever installs there), nor
// is anything lever's own steps write (/etc, /var/lib/lever, the homes, container storage).
var RootOnlyTrees = []string{"/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/share", "/usr/include", "/usr/src",
	"/boot", "/var/lib/dpkg", "/var/lib/apt", "/var/cache/apt"}
