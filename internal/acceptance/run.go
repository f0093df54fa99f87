package acceptance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lever-jail/lever/internal/egress"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guestside"
)

// Containers is the podman side, as acceptance needs it (bring-up adapts jail.Client).
type Containers interface {
	Containers(ctx context.Context) ([]ContainerInfo, error)
	Logs(ctx context.Context, name string) (string, error)
}

// Env is what one acceptance run works with.
type Env struct {
	Instance   string
	Backend    string
	Runner     guest.Runner
	Egress     guest.EgressSpec
	Expect     Expect
	BrokerCA   []byte
	Containers Containers
	// Secrets are the values that must be nowhere in the guest (the LLM API key).
	Secrets [][]byte
	// HelperLev is the Linux lev binary for the guest's architecture: `lev __guest probe`
	// serves the guest side. HelperInPlace says the guest sees the host's filesystem
	// (netns substrate), so it runs in place instead of being sent.
	HelperLev     string
	HelperInPlace bool
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

// Run measures and evaluates. Guest round-trips: one egress snapshot, one guest-side
// probe run (network probes, process inspection, secret scan together).
func Run(ctx context.Context, env Env) (*Report, error) {
	start := time.Now()
	var m Measured
	e := env.Expect
	rep, err := guest.VerifyEgress(ctx, env.Runner, env.Egress)
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
	var cs []ContainerInfo
	if env.Containers != nil {
		cs, err = env.Containers.Containers(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing lev containers: %w", err)
		}
	}
	m.Containers = cs
	req := Request{Probes: ProbesFor(e, env.BrokerCA)}
	for _, c := range cs {
		if c.Running && c.Pid > 0 {
			req.Pids = append(req.Pids, c.Pid)
		}
	}
	var secret []byte
	if len(env.Secrets) > 0 {
		secret = env.Secrets[0]
	}
	if len(secret) > 0 {
		var b [8]byte
		rand.Read(b[:])
		base := binary.LittleEndian.Uint64(b[:]) | 1
		tgt, dig := Fingerprint(secret, base)
		sc := &Scan{Len: len(secret), Base: base, Target: tgt, SHA256: dig, MaxMiB: 256}
		for _, pid := range req.Pids {
			root := "/proc/" + strconv.Itoa(pid) + "/root"
			// The trailing slash makes the walk follow the magic link into the container's
			// view instead of stopping at the link itself.
			sc.Roots = append(sc.Roots, root+"/")
			sc.Prune = append(sc.Prune, root+"/proc", root+"/sys", root+"/dev")
			sc.Files = append(sc.Files, "/proc/"+strconv.Itoa(pid)+"/environ")
		}
		if !e.DevSubstrate {
			sc.Roots = append(sc.Roots, "/")
			sc.Prune = append(sc.Prune, "/proc", "/sys", "/dev")
			m.WholeGuest = true
		}
		req.Scan = sc
	}
	argv, prefix, err := guestside.Argv(env.HelperLev, env.HelperInPlace, guestside.ModeProbe)
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(req)
	res, err := guest.RunOK(ctx, env.Runner, guest.Cmd{As: guest.Root, Argv: argv, Stdin: append(prefix, body...)})
	if err != nil {
		return nil, fmt.Errorf("running the acceptance probes in the guest: %w", err)
	}
	var resp Response
	if err := json.Unmarshal(res.Stdout, &resp); err != nil {
		return nil, fmt.Errorf("reading the guest's acceptance answer: %w (%q)", err, truncate(res.Stdout))
	}
	m.Outcomes = map[string]Outcome{}
	for _, o := range resp.Outcomes {
		m.Outcomes[o.ID] = o
	}
	m.Procs = resp.Procs
	m.Scanned = resp.Scanned
	for _, h := range resp.Hits {
		if strings.HasSuffix(h, "/environ") {
			m.EnvHits = append(m.EnvHits, "environment of pid "+strings.Split(h, "/")[2])
		} else {
			m.ScanHits = append(m.ScanHits, h)
		}
	}
	if len(secret) > 0 && env.Containers != nil {
		for _, c := range cs {
			logs, err := env.Containers.Logs(ctx, c.Name)
			if err != nil {
				m.ScanErr = err.Error()
				continue
			}
			m.Scanned++
			if bytes.Contains([]byte(logs), secret) {
				m.LogHits = append(m.LogHits, "logs of "+c.Name)
			}
		}
	}
	if len(secret) == 0 {
		m.ScanErr = "no API key configured to search for"
	}
	out := &Report{Instance: env.Instance, Backend: env.Backend, Posture: string(env.Egress.Posture), Started: start.UTC(),
		Results: Evaluate(e, m)}
	out.DurationMS = time.Since(start).Milliseconds()
	out.Passed = len(out.Failed()) == 0
	return out, nil
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
