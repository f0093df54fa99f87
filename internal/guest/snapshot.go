package guest

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/egress"
)

// Tools names the iptables binaries in the guest. The defaults are the distribution's
// (`iptables`, nft on Debian); tests name iptables-legacy's or wrappers that count and
// fail commits.
type Tools struct {
	IPTables         string
	IP6Tables        string
	IPTablesRestore  string
	IP6TablesRestore string
}

// DefaultTools is the guest's default iptables.
func DefaultTools() Tools {
	return Tools{IPTables: "iptables", IP6Tables: "ip6tables", IPTablesRestore: "iptables-restore", IP6TablesRestore: "ip6tables-restore"}
}

// LegacyTools names iptables-legacy, for guests (and tests) that use the legacy backend.
func LegacyTools() Tools {
	return Tools{IPTables: "iptables-legacy", IP6Tables: "ip6tables-legacy", IPTablesRestore: "iptables-legacy-restore", IP6TablesRestore: "ip6tables-legacy-restore"}
}

func (t Tools) orDefault() Tools {
	d := DefaultTools()
	if t.IPTables == "" {
		t.IPTables = d.IPTables
	}
	if t.IP6Tables == "" {
		t.IP6Tables = d.IP6Tables
	}
	if t.IPTablesRestore == "" {
		t.IPTablesRestore = d.IPTablesRestore
	}
	if t.IP6TablesRestore == "" {
		t.IP6TablesRestore = d.IP6TablesRestore
	}
	return t
}

func (t Tools) list(f egress.Family) string {
	if f == egress.V6 {
		return t.IP6Tables
	}
	return t.IPTables
}

func (t Tools) restore(f egress.Family) string {
	if f == egress.V6 {
		return t.IP6TablesRestore
	}
	return t.IPTablesRestore
}

// SnapshotRequest says what one Snapshot reads.
type SnapshotRequest struct {
	Tools Tools
	// Alias is the host alias name, resolved with getent inside the guest, under the
	// chains as they are (before anything changes).
	Alias string
	// LimaDNS also reads Lima's LIMADNS nat chain (the resolver's DNAT targets).
	LimaDNS bool
	// RoundTrips remembers the last nft round trip (see RoundTripCache); nil: always
	// make it.
	RoundTrips RoundTripCache
	// Containment is a read-only script part (a backend's in-guest containment check,
	// backend.Containment) run in the same call after the snapshot part. It answers in
	// sections named ContainmentPrefix+...; they are Snapshot.Containment.
	Containment string
	// Extra is a read-only script part of the caller's, run last in the same call (never
	// in a rebuild's read-back); its sections come back with the snapshot's, for the
	// caller to read (bring-up's look for lev's installed copy, in the call after a boot).
	// Its section names must not be the snapshot's or begin with ContainmentPrefix.
	Extra string
	// Short: the caller rebuilds both chains on any drift (bring-up, egress apply). A guest
	// whose two tables list cleanly and hold no LEVER_EGRESS chain (one just booted) then
	// answers without the nft view, the round trip and the foreign rules (section
	// SectionChainless; Snapshot.Chainless): the rebuild's read-back reads them for the
	// tables that count. Never for a verification, which reports what is there.
	Short bool
	// readBack: the rebuild's read-back (readBackOf), which lists the tables only.
	readBack bool
}

// readBackOf is req for the read-back that ends a rebuild's call: the tables and their
// nft view only. The alias, LIMADNS and the containment part were read and judged before
// the commits, in the snapshot the rebuild was planned from, and are not read twice
// (under emulation each lookup is a process at 0.1-0.2 s).
func readBackOf(req SnapshotRequest) SnapshotRequest {
	req.LimaDNS, req.Containment, req.Extra, req.Short, req.readBack = false, "", "", false, true
	return req
}

// RoundTripCache remembers the nft view of the last round trip of the guest's iptables
// listings, keyed by a hash (made in the guest) of nft's and iptables-nft-restore's
// versions and both families' iptables-nft-save output, counters and comments removed.
// The round trip is a function of exactly that input, so when the key is unchanged the
// snapshot skips the scratch namespace and compares the live table with the remembered
// result: a rule that changes the listing changes the key, and one that does not (a
// look-alike) still differs from the remembered nft view. Bring-up keeps it in the
// instance's state dir.
type RoundTripCache interface {
	Load() (key, nftJSON string)
	Store(key, nftJSON string)
}

// Snapshot is everything verification needs, read in ONE guest call.
type Snapshot struct {
	V4 egress.FamilyState `json:"ipv4"`
	V6 egress.FamilyState `json:"ipv6"`
	// ResolvedV4 / ResolvedV6 are getent's answers (zero Addr when the lookup failed).
	ResolvedV4 netip.Addr `json:"resolved_v4"`
	ResolvedV6 netip.Addr `json:"resolved_v6"`
	// LookupError says why the IPv4 lookup gave nothing.
	LookupError string `json:"lookup_error,omitempty"`
	// LimaDNSFound says the LIMADNS chain exists; LimaDNS are its DNAT targets.
	LimaDNSFound bool               `json:"limadns_found,omitempty"`
	LimaDNS      []egress.ProtoPort `json:"limadns,omitempty"`
	LimaDNSAddrs []netip.Addr       `json:"limadns_addrs,omitempty"`
	// Containment is the answer of SnapshotRequest.Containment: its sections (names
	// beginning with ContainmentPrefix).
	Containment Sections `json:"containment,omitempty"`
	// Foreign: rules in any nf_tables table that can send a packet somewhere LEVER_EGRESS
	// did not judge (egress.ForeignRedirects); read wherever the guest has nft, legacy
	// iptables guests included.
	Foreign []egress.NFTFinding `json:"foreign,omitempty"`
	// Chainless: a Short snapshot of a guest with no LEVER_EGRESS chain in either family,
	// taken without the nft view (so without the cross-check, RebuildOutput and Foreign):
	// drift that only a rebuild answers, and its read-back reads the rest.
	Chainless bool `json:"chainless,omitempty"`
}

// Family returns one family's live state.
func (s Snapshot) Family(f egress.Family) egress.FamilyState {
	if f == egress.V6 {
		return s.V6
	}
	return s.V4
}

// VerifyEgress compares the snapshot with the desired ruleset, rule for rule, in order.
func (s Snapshot) VerifyEgress(desired egress.Ruleset) egress.Diff {
	d := egress.Compare(desired, s.V4, s.V6)
	for _, f := range s.Foreign {
		d.Foreign = append(d.Foreign, f.String())
	}
	return d
}

// marker is the prefix of the markers guest scripts print (Script adds a nonce to it).
const marker = "@@lever-"

//go:embed scripts/snapshot.sh
var snapshotPart string

// The snapshot's sections another reader of the same call may take (Lima's post-boot
// facts, read from the snapshot its EnsureUp carries): the host alias's IPv4 lines of
// `getent ahosts` (as `getent ahostsv4` answers them), and `iptables -t nat -S LIMADNS`.
const (
	SectionAliasV4 = "alias4"
	SectionLimaDNS = "limadns"
	// SectionChainless: a Short snapshot found no LEVER_EGRESS chain and skipped the nft
	// view (scripts/snapshot.sh).
	SectionChainless = "chainless"
)

// ContainmentPrefix begins the name of every section a containment part prints, so the
// snapshot can tell them from its own.
const ContainmentPrefix = "containment."

// SnapshotParts are the script parts (without the prelude) that take the snapshot req
// asks for: the snapshot itself and, when asked, the backend's containment part and the
// caller's Extra part. A caller
// that folds the snapshot into a larger script (bring-up's observation) appends them;
// SnapshotEnv are their inputs.
func SnapshotParts(req SnapshotRequest) []string {
	parts := []string{snapshotPart}
	for _, p := range []string{req.Containment, req.Extra} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return parts
}

// SnapshotEnv are the snapshot script's inputs (NAME=value) for req.
func SnapshotEnv(req SnapshotRequest) []string {
	t := req.Tools.orDefault()
	cachedKey := "-"
	if req.RoundTrips != nil {
		if k, _ := req.RoundTrips.Load(); k != "" {
			cachedKey = k
		}
	}
	lima := "0"
	if req.LimaDNS {
		lima = "1"
	}
	env := []string{"LEVER_IPT=" + t.IPTables, "LEVER_IP6T=" + t.IP6Tables, "LEVER_ALIAS=" + req.Alias,
		"LEVER_LIMADNS=" + lima, "LEVER_RTKEY=" + cachedKey}
	if req.readBack {
		env = append(env, "LEVER_READBACK=1")
	}
	if req.Short {
		env = append(env, "LEVER_SHORT=1")
	}
	return env
}

// TakeSnapshot reads both families' filter tables (LEVER_EGRESS and OUTPUT), resolves the
// alias and, when asked, reads LIMADNS: one guest call, so an unchanged bring-up costs one
// round-trip.
func TakeSnapshot(ctx context.Context, r Runner, req SnapshotRequest) (Snapshot, error) {
	sc := NewScript(SnapshotParts(req)...)
	res, err := r.Run(ctx, sc.Cmd(SnapshotEnv(req)))
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading egress state from the guest: %w", err)
	}
	return readSnapshot(sc, res, req)
}

// ParseSnapshot reads a snapshot from the sections SnapshotPart printed.
func ParseSnapshot(secs Sections, req SnapshotRequest) (Snapshot, error) {
	var err error
	var s Snapshot
	nf := strings.Contains(secs["variant"].Out, "nf_tables")
	for _, f := range []egress.Family{egress.V4, egress.V6} {
		name := "filter4"
		if f == egress.V6 {
			name = "filter6"
		}
		sec, ok := secs[name]
		if !ok {
			return Snapshot{}, fmt.Errorf("reading egress state: no %s listing in the guest's answer", f)
		}
		stderr := strings.TrimSpace(secs[name+".stderr"].Out)
		var st egress.FamilyState
		switch {
		case sec.RC != 0 && nf && strings.Contains(stderr, "incompatible"):
			// A rule iptables cannot translate: nothing it lists can be trusted, and the
			// nft view below names what is there. Verification reports drift; apply
			// rebuilds OUTPUT and the chain without needing iptables to list them.
			st.Unlisted = stderr
		case sec.RC != 0:
			return Snapshot{}, fmt.Errorf("listing the %s filter table (%s -S) exited %d: %s", f, req.Tools.orDefault().list(f), sec.RC, stderr)
		default:
			if st, err = egress.ParseFamily(f, sec.Out); err != nil {
				return Snapshot{}, err
			}
		}
		if nf {
			st.NFTables = true
			if err := crossCheck(f, secs, &st, req.RoundTrips); err != nil {
				return Snapshot{}, err
			}
		}
		if f == egress.V6 {
			s.V6 = st
		} else {
			s.V4 = st
		}
	}
	if secs.Has(SectionChainless) {
		// The script skips the nft view only when asked and only when both listings
		// succeeded without the chain; an answer that says otherwise is not trusted.
		switch {
		case !req.Short:
			return Snapshot{}, errors.New("reading egress state: the guest skipped the nft view of its tables unasked")
		case s.V4.ChainExists || s.V6.ChainExists || s.V4.Unlisted != "" || s.V6.Unlisted != "" || secs.Has("variant"):
			return Snapshot{}, errors.New("reading egress state: the guest skipped the nft view of tables that hold LEVER_EGRESS or could not be listed")
		}
		s.Chainless = true
	}
	if sec, ok := secs["nft"]; ok && sec.RC == 0 {
		if s.Foreign, err = egress.ForeignRedirects(sec.Out, secs["nfttext"].Out); err != nil {
			return Snapshot{}, err
		}
	}
	if c := secs.Prefixed(ContainmentPrefix); len(c) > 0 {
		s.Containment = c
	}
	if sec := secs[SectionAliasV4]; sec.RC == 0 {
		s.ResolvedV4 = firstAddr(sec.Out, egress.V4)
	}
	if !s.ResolvedV4.IsValid() {
		s.LookupError = fmt.Sprintf("getent ahosts %s: no IPv4 address (exit %d)", req.Alias, secs[SectionAliasV4].RC)
		if e := strings.TrimSpace(secs["alias4.stderr"].Out); e != "" {
			s.LookupError += ": " + e
		}
	}
	if sec := secs["alias6"]; sec.RC == 0 {
		s.ResolvedV6 = firstAddr(sec.Out, egress.V6)
	}
	if req.LimaDNS {
		sec := secs[SectionLimaDNS]
		if sec.RC != 0 && !strings.Contains(secs["limadns.stderr"].Out, "No chain/target/match") && !strings.Contains(secs["limadns.stderr"].Out, "does not exist") && !strings.Contains(secs["limadns.stderr"].Out, "incompatible") {
			return Snapshot{}, fmt.Errorf("reading Lima's LIMADNS nat chain exited %d: %s", sec.RC, strings.TrimSpace(secs["limadns.stderr"].Out))
		}
		if sec.RC == 0 {
			s.LimaDNSFound = true
			s.LimaDNS, s.LimaDNSAddrs, err = egress.ParseLimaDNS(sec.Out)
			if err != nil {
				return Snapshot{}, err
			}
		}
	}
	return s, nil
}

// firstAddr takes the first address of family f from getent ahosts output. getent
// ahostsv6 answers an IPv4-only name with IPv4-mapped addresses; those are not an IPv6
// alias.
func firstAddr(out string, f egress.Family) netip.Addr {
	for _, line := range strings.Split(out, "\n") {
		fs := strings.Fields(line)
		if len(fs) == 0 {
			continue
		}
		a, err := netip.ParseAddr(fs[0])
		if err != nil {
			continue
		}
		if f == egress.V4 && a.Is4() {
			return a
		}
		if f == egress.V6 && a.Is6() && !a.Is4In6() {
			return a
		}
	}
	return netip.Addr{}
}

// crossCheck fills st.Unaccounted (and RebuildOutput) from the family's nft sections.
func crossCheck(f egress.Family, secs Sections, st *egress.FamilyState, cache RoundTripCache) error {
	if _, missing := secs["nft-missing"]; missing {
		// Fail closed: without nft the guest's own translation is all there is to read.
		st.Unaccounted = append(st.Unaccounted, egress.NFTFinding{What: "nft is not installed in the guest (Debian package nftables), so rules iptables -S cannot print cannot be ruled out"})
		return nil
	}
	fam := "ip"
	if f == egress.V6 {
		fam = "ip6"
	}
	live, text, rt := secs["nft"], secs["nfttext"], secs["rt"]
	if live.RC != 0 {
		st.Unaccounted = append(st.Unaccounted, egress.NFTFinding{What: fmt.Sprintf("nft -j list ruleset exited %d: %s", live.RC, strings.TrimSpace(secs["nft.stderr"].Out))})
		st.RebuildOutput = true
		return nil
	}
	c := egress.NFTCheck{Family: fam, Live: live.Out, Text: text.Out}
	if st.Unlisted != "" {
		fs, err := egress.NFTRulesIn(c, "OUTPUT")
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		fs2, err := egress.NFTRulesIn(c, egress.Chain)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		st.Unaccounted = append(st.Unaccounted, append(fs, fs2...)...)
		st.RebuildOutput = true
		return nil
	}
	key := strings.TrimSpace(secs["rtkey"].Out)
	_, made := secs["rt"]
	switch {
	case made && rt.RC != 0:
		st.Unaccounted = append(st.Unaccounted, egress.NFTFinding{What: fmt.Sprintf("the round trip of the iptables listings through a scratch namespace failed (exit %d): %s", rt.RC, strings.TrimSpace(secs["rt.stderr"].Out))})
		return nil
	case made:
		c.RoundTrip = rt.Out
		if cache != nil && key != "" {
			cache.Store(key, rt.Out)
		}
	default:
		// The guest skipped the round trip: its key matched the remembered one.
		var k string
		if cache != nil {
			k, c.RoundTrip = cache.Load()
		}
		if k == "" || k != key {
			st.Unaccounted = append(st.Unaccounted, egress.NFTFinding{What: "the round trip of the iptables listings was neither made nor remembered"})
			return nil
		}
	}
	fs, err := egress.CrossCheck(f, c)
	if err != nil {
		return err
	}
	for _, x := range fs {
		// Anything but the chain itself (OUTPUT, another chain, the table's flags) is
		// repaired by the nft transaction that rebuilds OUTPUT; the chain restore
		// repairs LEVER_EGRESS.
		if x.Chain != egress.Chain {
			st.RebuildOutput = true
		}
	}
	st.Unaccounted = append(st.Unaccounted, fs...)
	return nil
}

// FileRoundTrips is a RoundTripCache in one file (0600), written atomically.
type FileRoundTrips struct{ Path string }

// Load implements RoundTripCache; a missing or unreadable file is an empty cache.
func (f FileRoundTrips) Load() (string, string) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return "", ""
	}
	key, body, ok := strings.Cut(string(b), "\n")
	if !ok || len(key) != 64 {
		return "", ""
	}
	return key, body
}

// Store implements RoundTripCache. A failure only costs the next snapshot a round trip.
func (f FileRoundTrips) Store(key, nftJSON string) {
	if len(key) != 64 || os.MkdirAll(filepath.Dir(f.Path), 0o700) != nil {
		return
	}
	tmp := f.Path + ".tmp"
	if os.WriteFile(tmp, []byte(key+"\n"+nftJSON), 0o600) == nil {
		_ = os.Rename(tmp, f.Path)
	}
}
