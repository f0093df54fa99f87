package guest

import (
	"fmt"
	"strings"
)

// CarriedSnapshot is the egress snapshot run by another guest program inside the same
// guest call: lever acceptance's helper (`lev __guest probe`) runs it first, because its
// probes aim at the host alias the snapshot finds, and returns what it printed. The host
// then parses and judges that output exactly as a TakeSnapshot's (ReadCarried), so the
// verdict never rests on the guest's reading; the guest's reading (Aliases) only aims the
// probes, and the host recomputes it from the same bytes to check the aim.
type CarriedSnapshot struct {
	// Argv and Stdin run the snapshot script (Script.Cmd: `env NAME=value... sh -s --`).
	Argv  []string `json:"argv"`
	Stdin string   `json:"stdin"`
	// Mark is the script's section marker (its nonce), which Aliases needs to read it.
	Mark string `json:"mark"`
	// Spec is the egress spec the aliases are planned with (PlanEgress).
	Spec EgressSpec `json:"spec"`
}

// CarriedAnswer is what running a CarriedSnapshot printed.
type CarriedAnswer struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr,omitempty"`
	RC     int    `json:"rc"`
	// Err says why the script could not be started at all.
	Err string `json:"error,omitempty"`
}

// Carry builds the snapshot spec asks for, to be run by another guest program; the Script
// is the host's handle for reading the answer (ReadCarried).
func Carry(spec EgressSpec) (CarriedSnapshot, Script) {
	req := spec.snapshotRequest()
	sc := NewScript(SnapshotParts(req)...)
	cmd := sc.Cmd(SnapshotEnv(req))
	return CarriedSnapshot{Argv: cmd.Argv, Stdin: string(cmd.Stdin), Mark: sc.mark, Spec: spec}, sc
}

// Aliases is the host alias (IPv4, IPv6; "" for none or when the snapshot cannot say)
// that PlanEgress takes from the snapshot's answer: the lookup, or, when it failed under
// the closed chain, the addresses the live chains name. It is a pure function of the
// answer, run by the guest helper to aim its probes and by the host to check that aim.
func (c CarriedSnapshot) Aliases(a CarriedAnswer) (v4, v6 string) {
	if a.Err != "" || a.RC != 0 {
		return "", ""
	}
	secs, err := parseSections(a.Stdout, c.Mark)
	if err != nil {
		return "", ""
	}
	// No round-trip cache here: the alias does not depend on the nft cross-check.
	req := c.Spec.snapshotRequest()
	req.RoundTrips = nil
	snap, err := ParseSnapshot(secs, req)
	if err != nil {
		return "", ""
	}
	d, err := PlanEgress(c.Spec, snap)
	if err != nil {
		return "", ""
	}
	return d.AliasV4, d.AliasV6
}

// ReadCarried reads a carried snapshot's answer on the host exactly as TakeSnapshot reads
// its own call's (the same errors, the same parse, the spec's round-trip cache).
func ReadCarried(sc Script, spec EgressSpec, a CarriedAnswer) (Snapshot, error) {
	if a.Err != "" {
		return Snapshot{}, fmt.Errorf("reading egress state from the guest: %s", a.Err)
	}
	return readSnapshot(sc, Result{Stdout: []byte(a.Stdout), Stderr: []byte(a.Stderr), ExitCode: a.RC}, spec.snapshotRequest())
}

func readSnapshot(sc Script, res Result, req SnapshotRequest) (Snapshot, error) {
	if err := shellStatus(res); err != nil {
		return Snapshot{}, err
	}
	secs, err := sc.Parse(res.Stdout)
	if err != nil {
		return Snapshot{}, err
	}
	return ParseSnapshot(secs, req)
}

// shellStatus is the error of a snapshot script's shell that did not exit 0: what it
// printed may stop anywhere.
func shellStatus(res Result) error {
	if res.ExitCode != 0 {
		return fmt.Errorf("reading egress state from the guest: sh exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}
