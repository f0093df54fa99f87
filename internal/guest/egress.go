package guest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/egress"
)

// EgressSpec is what the configuration asks of the egress firewall.
type EgressSpec struct {
	Posture egress.Posture
	// Alias is the host alias name the guest resolves (host.orb.internal, ...).
	Alias string
	// Ports are manager.allow_ports.
	Ports []int
	// Lima: read LIMADNS and, in the open posture, ACCEPT its DNAT targets on the alias.
	Lima bool
	// ReplyPorts: guest TCP ports whose ESTABLISHED replies to the alias are accepted
	// (Lima's host-to-guest SSH: 22).
	ReplyPorts []int
	Tools      Tools
	// Containment is the backend's in-guest containment check (backend.Containment): a
	// read-only script part run in the snapshot call, and the judge of the sections it
	// prints. When set, a drift is refused before anything in the guest changes.
	// RoundTrips: see RoundTripCache (nil: the round trip is made on every snapshot).
	RoundTrips       RoundTripCache       `json:"-"`
	Containment      string               `json:"containment,omitempty"`
	CheckContainment func(Sections) error `json:"-"`
}

func (s EgressSpec) snapshotRequest() SnapshotRequest {
	return SnapshotRequest{Tools: s.Tools, Alias: s.Alias, LimaDNS: s.Lima, Containment: s.Containment, RoundTrips: s.RoundTrips}
}

// ErrContainment is wrapped by a refusal for containment drift found in the snapshot call.
var ErrContainment = errors.New("containment drifted")

func (s EgressSpec) checkContainment(snap Snapshot) error {
	if s.CheckContainment == nil {
		return nil
	}
	if err := s.CheckContainment(snap.Containment); err != nil {
		return fmt.Errorf("%w, refusing to continue: %v", ErrContainment, err)
	}
	return nil
}

// AliasSource says where a plan's host alias address came from. Its value is what
// `lever egress plan` prints and the alias_source JSON field carries.
type AliasSource string

const (
	// AliasFromLookup: resolved in the guest, under the chain that was live.
	AliasFromLookup AliasSource = "lookup"
	// AliasFromLiveChain: the lookup failed under a closed chain, so the addresses were
	// read back from the live rules (docs/egress.md).
	AliasFromLiveChain AliasSource = "live-chain"
	// AliasFromFlag: given on the command line for an offline plan (OfflineSnapshot).
	AliasFromFlag AliasSource = "flag"
)

// Desired is the resolved plan: the inputs the ruleset was rendered from, and how the
// alias was obtained.
type Desired struct {
	Inputs      egress.Inputs  `json:"-"`
	Ruleset     egress.Ruleset `json:"ruleset"`
	AliasV4     string         `json:"alias_v4"`
	AliasV6     string         `json:"alias_v6,omitempty"`
	AliasSource AliasSource    `json:"alias_source"`
	Warnings    []string       `json:"warnings,omitempty"`
}

// PlanEgress turns the spec and a snapshot into the desired ruleset. The alias comes from
// the lookup made under the old chain; when that lookup failed and the live IPv4 chain is
// closed (its catch-all DROP blocks DNS by design), the aliases are read back from the
// live rules, each from its own family, with a warning naming them. With an open or
// absent chain a failed lookup is an error.
func PlanEgress(spec EgressSpec, snap Snapshot) (Desired, error) {
	d := Desired{AliasSource: AliasFromLookup}
	in := egress.Inputs{Posture: spec.Posture, Ports: spec.Ports, ReplyPorts: spec.ReplyPorts}
	if snap.ResolvedV4.IsValid() {
		in.AliasV4, in.AliasV6 = snap.ResolvedV4, snap.ResolvedV6
	} else {
		if !snap.V4.ChainExists || !egress.IsClosed(snap.V4.Chain) {
			state := "open"
			if !snap.V4.ChainExists {
				state = "absent"
			}
			return Desired{}, fmt.Errorf("resolving host alias %s in the guest failed (%s) and the live IPv4 chain is %s, so nothing can be read back: refusing to apply", spec.Alias, snap.LookupError, state)
		}
		a4, err := egress.ReadAlias(egress.V4, snap.V4.Chain)
		if err != nil {
			return Desired{}, fmt.Errorf("reading the host alias back from the live chain: %w", err)
		}
		if !a4.IsValid() {
			return Desired{}, fmt.Errorf("resolving host alias %s failed (%s) and the closed IPv4 chain names no alias to read back", spec.Alias, snap.LookupError)
		}
		a6, err := egress.ReadAlias(egress.V6, snap.V6.Chain)
		if err != nil {
			return Desired{}, fmt.Errorf("reading the host alias back from the live chain: %w", err)
		}
		in.AliasV4, in.AliasV6 = a4, a6
		d.AliasSource = AliasFromLiveChain
		names := "IPv4 " + a4.String()
		if a6.IsValid() {
			names += ", IPv6 " + a6.String()
		}
		d.Warnings = append(d.Warnings, fmt.Sprintf("resolving %s failed under the closed chain (%s); using the aliases the live chains name: %s", spec.Alias, snap.LookupError, names))
	}
	if spec.Lima && spec.Posture == egress.Open {
		if !snap.LimaDNSFound {
			d.Warnings = append(d.Warnings, "Lima's LIMADNS nat chain is absent: no resolver DNAT target is allowed, so DNS through the host resolver will not work")
		}
		in.DNAT = snap.LimaDNS
		for _, ad := range snap.LimaDNSAddrs {
			if ad != in.AliasV4 {
				d.Warnings = append(d.Warnings, fmt.Sprintf("LIMADNS rewrites to %s, not the alias %s; its ports are allowed on the alias only", ad, in.AliasV4))
			}
		}
	}
	rs, err := egress.Render(in)
	if err != nil {
		return Desired{}, err
	}
	d.Inputs, d.Ruleset = in, rs
	d.AliasV4 = in.AliasV4.String()
	if in.AliasV6.IsValid() {
		d.AliasV6 = in.AliasV6.String()
	}
	return d, nil
}

// Outcome is what EnsureEgress or VerifyEgress concluded about the live chains. Its value
// is the outcome JSON field.
type Outcome string

const (
	// Unchanged: the live chains matched exactly; nothing was changed.
	Unchanged Outcome = "unchanged"
	// Rebuilt: they differed and EnsureEgress rebuilt and re-verified them.
	Rebuilt Outcome = "rebuilt"
	// Drifted: they differ and nothing was changed (a verification only, or a rebuild
	// that failed). It is the empty string so the JSON stays what it was.
	Drifted Outcome = ""
)

// Report says what EnsureEgress found and did.
type Report struct {
	Outcome Outcome     `json:"outcome"` // unchanged | rebuilt | "" (drifted)
	Diff    egress.Diff `json:"diff"`    // what differed before (empty when unchanged)
	Lines   []string    `json:"differences,omitempty"`
	Desired Desired     `json:"desired"`
	// LiveClosedBefore: the live chains carried the closed catch-all DROP in both families.
	LiveClosedBefore bool `json:"live_closed_before"`
}

// VerifyEgress reads the live state (one guest call) and compares it with what spec asks
// for. It changes nothing.
func VerifyEgress(ctx context.Context, r Runner, spec EgressSpec) (Report, error) {
	snap, err := TakeSnapshot(ctx, r, spec.snapshotRequest())
	if err != nil {
		return Report{}, err
	}
	return VerifySnapshot(spec, snap)
}

// SnapshotRequest is what a snapshot for this spec reads (its containment check included),
// for a caller that folds the snapshot into a larger script.
func (s EgressSpec) SnapshotRequest() SnapshotRequest { return s.snapshotRequest() }

// RebuildRequest is SnapshotRequest for a caller that rebuilds on any drift
// (EnsureEgressFrom follows): Short, so a guest with no chain at all is answered without
// the nft view its rebuild's read-back reads anyway.
func (s EgressSpec) RebuildRequest() SnapshotRequest {
	req := s.snapshotRequest()
	req.Short = true
	return req
}

// VerifySnapshot is VerifyEgress on a snapshot already taken: no guest call.
func VerifySnapshot(spec EgressSpec, snap Snapshot) (Report, error) {
	if err := spec.checkContainment(snap); err != nil {
		return Report{}, err
	}
	return verify(spec, snap)
}

func verify(spec EgressSpec, snap Snapshot) (Report, error) {
	want, err := PlanEgress(spec, snap)
	if err != nil {
		return Report{}, err
	}
	diff := snap.VerifyEgress(want.Ruleset)
	rep := Report{Outcome: Unchanged, Diff: diff, Desired: want, LiveClosedBefore: egress.LiveClosed(snap.V4, snap.V6)}
	if !diff.Match() {
		rep.Outcome = Drifted
		rep.Lines = diff.Lines()
	}
	return rep, nil
}

// EnsureEgress is the bring-up's egress step: it verifies the live chains and leaves them
// alone when they match exactly (one guest call), and otherwise rebuilds them with
// ApplyEgress and verifies the result it read back in the same call (two guest calls in
// all; three when a chainless snapshot's read-back shows OUTPUT needs nft's rebuild).
func EnsureEgress(ctx context.Context, r Runner, spec EgressSpec) (Report, error) {
	snap, err := TakeSnapshot(ctx, r, spec.RebuildRequest())
	if err != nil {
		return Report{}, err
	}
	return EnsureEgressFrom(ctx, r, spec, snap)
}

// EnsureEgressFrom is EnsureEgress from a snapshot already taken (bring-up reads it in its
// observation call): when the chains match it makes no guest call at all. The containment
// check in the snapshot is judged first, before anything in the guest changes.
func EnsureEgressFrom(ctx context.Context, r Runner, spec EgressSpec, snap Snapshot) (Report, error) {
	if err := spec.checkContainment(snap); err != nil {
		return Report{}, err
	}
	rep, err := verify(spec, snap)
	if err != nil {
		return Report{}, err
	}
	if rep.Outcome == Unchanged {
		return rep, nil
	}
	if !rep.Diff.OwnMatch() {
		// The commits and the read-back are one guest call (ApplyEgress); the read-back is
		// the same snapshot TakeSnapshot takes, and is held to the same rule-for-rule
		// comparison as the first one.
		after, err := ApplyEgress(ctx, r, spec.snapshotRequest(), snap, rep.Desired.Ruleset)
		if err != nil {
			return rep, err
		}
		d := after.VerifyEgress(rep.Desired.Ruleset)
		if !d.OwnMatch() && snap.Chainless && (after.V4.RebuildOutput || after.V6.RebuildOutput) {
			// A chainless snapshot has no nft view, so the rebuild could not know that
			// OUTPUT holds a rule iptables cannot delete or list truly; its read-back does,
			// and one more rebuild planned from it replaces OUTPUT with nft (one call more,
			// only on such a guest).
			if after, err = ApplyEgress(ctx, r, spec.snapshotRequest(), after, rep.Desired.Ruleset); err != nil {
				return rep, err
			}
			d = after.VerifyEgress(rep.Desired.Ruleset)
		}
		if !d.OwnMatch() {
			return rep, fmt.Errorf("after the rebuild the live chains still differ from the desired ones: %s", strings.Join(d.Lines(), "; "))
		}
		rep.Outcome = Rebuilt
		snap = after
	}
	// Rules in other tables that route around the chain are not lever's to delete (they
	// may be the operator's or the distribution's); the bring-up refuses to go on with
	// them in place, naming each.
	if len(snap.Foreign) > 0 {
		var names []string
		for _, f := range snap.Foreign {
			names = append(names, f.String())
		}
		return rep, fmt.Errorf("the guest's ruleset holds %d rule(s) that can send packets somewhere LEVER_EGRESS did not judge; remove them and re-run: %s", len(names), strings.Join(names, "; "))
	}
	return rep, nil
}

// Apply steps, in order. j = the jump made first and unique; c = the chain commit.
var applySteps = []struct {
	id   string
	fam  egress.Family
	jump bool
}{
	{"j6", egress.V6, true}, {"j4", egress.V4, true}, {"c6", egress.V6, false}, {"c4", egress.V4, false},
}

// ApplyScript is the commits of the one guest script ApplyEgress runs (rebuildScript
// appends the read-back): per family (IPv6 first) a restore commit that makes the jump
// OUTPUT's first and only copy, then per family (IPv6 first, IPv4 last) a restore commit
// that replaces the whole chain. It stops at the first failed commit and says which one.
func ApplyScript(tools Tools, snap Snapshot, desired egress.Ruleset) string {
	t := tools.orDefault()
	var b strings.Builder
	// Each commit is a section (guest.Script's format); the first that fails ends the
	// script, so nothing after it runs: no later commit, and not the read-back either.
	stop := "[ \"$rc\" = 0 ] || exit 0\n"
	for _, s := range applySteps {
		var input string
		if s.jump && snap.Family(s.fam).RebuildOutput {
			// OUTPUT holds a rule iptables cannot list or delete: iptables-restore's -D would
			// fail on it. Replace OUTPUT with the jump alone in one nft transaction (OUTPUT
			// is never without the jump), creating the base chain if it is missing.
			fam := "ip"
			if s.fam == egress.V6 {
				fam = "ip6"
			}
			b.WriteString("sec " + s.id + " sh -c " + shq(nftOutputScript(fam)) + "\n" + stop)
			continue
		}
		if s.jump {
			input = snap.Family(s.fam).JumpCommit()
		} else {
			input = egress.ChainRestore(desired.Rules(s.fam))
		}
		b.WriteString("sec " + s.id + " " + shq(t.restore(s.fam)) + " -w --noflush <<'LEVER_EOF'\n" + input + "LEVER_EOF\n" + stop)
	}
	return b.String()
}

// nftOutputScript makes OUTPUT of FAMILY's filter table hold exactly the jump, atomically.
// The rule is the one iptables makes for `-I OUTPUT 1 -j LEVER_EGRESS` (a counter and the
// jump), so the next verification's round trip sees it as iptables' own.
func nftOutputScript(fam string) string {
	base := "{ type filter hook output priority 0; policy accept; }"
	return "nft list chain " + fam + " filter OUTPUT >/dev/null 2>&1 || nft add chain " + fam + " filter OUTPUT " + shq(base) + " || exit 1\n" +
		"printf '%s\\n' 'add table " + fam + " filter { }' 'add chain " + fam + " filter " + egress.Chain + "' 'flush chain " + fam + " filter OUTPUT' 'add rule " + fam + " filter OUTPUT counter jump " + egress.Chain + "' | nft -f -\n"
}

// ErrApply is wrapped by every ApplyEgress failure of a commit (not by a failed
// read-back: the commits all succeeded then).
var ErrApply = errors.New("applying egress")

// ReadBackDone is the section the rebuild's script prints after its read-back, last: an
// answer without it was cut off before the read-back was complete, whatever sections it
// does hold, and that is an error, never a match.
const ReadBackDone = "readback-done"

// rebuildScript is the one script ApplyEgress runs: the commits (ApplyScript, which
// stops at the first failure), then, only when the last commit succeeded, the read-back
// (the snapshot part with readBackOf's inputs: both tables and their nft view, not the
// alias, LIMADNS or containment, judged before the commits), then ReadBackDone. The
// commits answer in sections j6 j4 c6 c4 (and their .stderr), the read-back in the
// snapshot's names (scripts/snapshot.sh); they share no name (TestRebuildSectionsDistinct),
// and were two ever to collide, Parse refuses a section printed twice, so the read-back
// would be an error, not a mixed-up match.
func rebuildScript(req SnapshotRequest, snap Snapshot, desired egress.Ruleset) Script {
	parts := append([]string{ApplyScript(req.Tools, snap, desired)}, SnapshotParts(readBackOf(req))...)
	return NewScript(append(parts, "put "+ReadBackDone)...)
}

// ApplyEgress commits the desired ruleset, given the snapshot it was planned from (the
// snapshot says how many jump copies to delete and whether the chain exists), and reads
// the chains back, in ONE guest call: after the last commit succeeds, the same `sh -s`
// reads both tables back (rebuildScript). A separate snapshot call would read
// the same thing one guest round trip later; on a VM each round trip is an ssh (or orb)
// call, sudo and a shell, 1.5-2 s under qemu TCG.
//
// It returns the read-back; the caller judges it (EnsureEgressFrom compares it rule for
// rule with desired). A commit that failed, or an answer that ends before the last commit,
// is an error wrapping ErrApply that says which family holds which chain, and no read-back
// is parsed (the script ran none). When all four committed but the read-back is missing,
// cut off or unreadable, the error is "verifying after the rebuild: ...".
func ApplyEgress(ctx context.Context, r Runner, req SnapshotRequest, snap Snapshot, desired egress.Ruleset) (Snapshot, error) {
	sc := rebuildScript(req, snap, desired)
	res, err := r.Run(ctx, sc.Cmd(SnapshotEnv(readBackOf(req))))
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: the guest call failed (%v); state unknown: IPv6 may hold the new chain and IPv4 the old; the next apply verifies and repairs", ErrApply, err)
	}
	// A cut-off answer still says which commits completed: the parse error matters only
	// to the read-back, which follows them.
	secs, perr := sc.Parse(res.Stdout)
	if err := commitsDone(req.Tools, snap, secs, res); err != nil {
		return Snapshot{}, err
	}
	after, err := readBack(secs, perr, res, readBackOf(req))
	if err != nil {
		return Snapshot{}, fmt.Errorf("verifying after the rebuild: %w", err)
	}
	return after, nil
}

// commitsDone is nil when all four commits succeeded, and otherwise the error naming the
// one that failed (or where the answer stopped) and the state each family is in.
func commitsDone(tools Tools, snap Snapshot, secs Sections, res Result) error {
	done := map[string]bool{}
	var failed, rc, msg string
	for _, st := range applySteps {
		sec, ok := secs[st.id]
		if !ok {
			break
		}
		if sec.RC != 0 {
			failed, rc = st.id, strconv.Itoa(sec.RC)
			msg = strings.TrimSpace(sec.Out + "\n" + secs[st.id+".stderr"].Out)
			break
		}
		done[st.id] = true
	}
	if failed == "" && done["c4"] {
		return nil
	}
	if failed == "" {
		// Interrupted: name the last step that is known to have committed.
		failed, msg = "interrupted", fmt.Sprintf("sh exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	} else {
		msg = fmt.Sprintf("%s exited %s: %s", restoreName(tools, snap, failed), rc, msg)
	}
	switch {
	case failed == "j6":
		return fmt.Errorf("%w: making the jump first and unique in IPv6 OUTPUT: %s; nothing changed", ErrApply, msg)
	case failed == "j4":
		return fmt.Errorf("%w: making the jump first and unique in IPv4 OUTPUT: %s; IPv6's jump is first and unique, both families hold their old chains", ErrApply, msg)
	case failed == "c6":
		return fmt.Errorf("%w: committing the IPv6 chain: %s; both families hold their old chains (the jumps are first and unique)", ErrApply, msg)
	case failed == "c4":
		return fmt.Errorf("%w: committing the IPv4 chain: %s; IPv6 holds the new rules and IPv4 the old", ErrApply, msg)
	case done["c6"]:
		return fmt.Errorf("%w: interrupted after the IPv6 commit (%s): IPv6 holds the new rules and IPv4 the old", ErrApply, msg)
	default:
		return fmt.Errorf("%w: interrupted before the chain commits (%s): both families hold their old chains", ErrApply, msg)
	}
}

// readBack is the snapshot the rebuild's script took after its commits, read exactly as
// TakeSnapshot reads its own call's (readSnapshot: the shell's status, the parse,
// ParseSnapshot), and complete only when ReadBackDone closes it.
func readBack(secs Sections, parseErr error, res Result, req SnapshotRequest) (Snapshot, error) {
	if err := shellStatus(res); err != nil {
		return Snapshot{}, err
	}
	if parseErr != nil {
		return Snapshot{}, parseErr
	}
	if !secs.Has(ReadBackDone) {
		return Snapshot{}, errors.New("the guest's answer ends before the read-back is complete (cut off?)")
	}
	return ParseSnapshot(secs, req)
}

func restoreName(tools Tools, snap Snapshot, step string) string {
	for _, s := range applySteps {
		if s.id == step && s.jump && snap.Family(s.fam).RebuildOutput {
			return "nft"
		}
		if s.id == step {
			return tools.orDefault().restore(s.fam)
		}
	}
	return "restore"
}

// SpecFor is the egress spec lever.yaml asks for on a backend: its posture, the backend's
// alias, manager.allow_ports; on Lima also the resolver's DNAT targets and SSH replies.
func SpecFor(cfg *config.Config, alias string) EgressSpec {
	// The broker's jail port is always open on the alias: it is how lev reaches the model
	// (and, under closed egress, the only way out). The admin port never is; config
	// validation refuses it in allow_ports.
	ports := append([]int(nil), cfg.Manager.AllowPorts...)
	if cfg.Broker.JailPort > 0 {
		ports = append(ports, cfg.Broker.JailPort)
	}
	s := EgressSpec{Posture: egress.Posture(cfg.Egress), Alias: alias, Ports: ports}
	if s.Posture == "" {
		s.Posture = egress.Open
	}
	if cfg.Backend == "lima" {
		s.Lima = true
		s.ReplyPorts = []int{22}
	}
	return s
}

// shq quotes s for POSIX sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
