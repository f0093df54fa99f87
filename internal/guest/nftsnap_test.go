package guest

import (
	"context"
	"strings"
	"testing"
)

type fixedRunner struct{ out string }

// Run answers with out, its markers carrying the nonce of the script it was given (as the
// guest's sh would print them).
func (f fixedRunner) Run(_ context.Context, c Cmd) (Result, error) {
	return Result{Stdout: []byte(strings.ReplaceAll(f.out, marker, scriptMark(c)))}, nil
}

// scriptMark is the marker a Script's first line sets.
func scriptMark(c Cmd) string {
	first, _, _ := strings.Cut(string(c.Stdin), "\n")
	return strings.TrimSuffix(strings.TrimPrefix(first, "M='"), "'")
}

func sect(name, body string, rc int) string {
	s := marker + "begin " + name + "\n"
	if body != "" {
		s += body + "\n"
	}
	return s + marker + "end " + name + " " + string(rune('0'+rc)) + "\n"
}

// How the snapshot reads the iptables variant and the nft view: a legacy guest has no nft
// view and nothing is demanded of it; an nf_tables guest without nft fails closed; a table
// iptables refuses is drift naming nft's rules, not an error; a containment section is
// passed through with its status.
func TestSnapshotNFTVariants(t *testing.T) {
	listing := "-P OUTPUT ACCEPT\n-N LEVER_EGRESS\n-A OUTPUT -j LEVER_EGRESS"
	base := sect("filter4", listing, 0) + sect("filter6", listing, 0) + sect("alias4", "10.0.0.1 STREAM h", 0)
	incompatible := sect("filter4", "", 1) + sect("filter4.stderr", "iptables v1.8.9 (nf_tables): table `filter' is incompatible, use 'nft' tool.", 0) +
		sect("filter6", listing, 0) + sect("alias4", "10.0.0.1 STREAM h", 0)
	ruleset := `{"nftables": [{"table": {"family": "ip", "name": "filter", "handle": 1}}, {"chain": {"family": "ip", "table": "filter", "name": "OUTPUT", "handle": 2}}, {"rule": {"family": "ip", "table": "filter", "chain": "OUTPUT", "handle": 6, "expr": [{"numgen": {}}, {"accept": null}]}}]}`
	text := "table ip filter { # handle 1\n\tchain OUTPUT { # handle 2\n\t\tnumgen random mod 2 0 accept # handle 6\n\t}\n}"
	cases := []struct {
		name        string
		out         string
		wantV4      string // substring of the IPv4 findings ("" = none)
		unlisted    bool
		rebuild     bool
		containment string
	}{
		{"legacy: no nft view", base + sect("variant", "iptables v1.8.9 (legacy)", 0), "", false, false, ""},
		{"nf_tables without nft fails closed", base + sect("variant", "iptables v1.8.9 (nf_tables)", 0) + sect("nft-missing", "", 0), "nft is not installed in the guest", false, false, ""},
		{"incompatible table names nft's rules", incompatible + sect("variant", "iptables v1.8.9 (nf_tables)", 0) + sect("nft", ruleset, 0) + sect("nfttext", text, 0) + sect("rt", "", 0),
			"OUTPUT holds `numgen random mod 2 0 accept` (nft handle 6)", true, true, ""},
		{"nft listing fails", base + sect("variant", "iptables v1.8.9 (nf_tables)", 0) + sect("nft", "", 1) + sect("nft.stderr", "Error: boom", 0), "nft -j list ruleset exited 1: Error: boom", false, true, ""},
		{"containment passed through", base + sect("variant", "iptables v1.8.9 (legacy)", 0) + sect("containment.kvm", "no", 3) + sect("unrelated", "x", 0), "", false, false, "no"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := TakeSnapshot(context.Background(), fixedRunner{c.out}, SnapshotRequest{Alias: "h"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range s.V4.Unaccounted {
				got = append(got, f.String())
			}
			joined := strings.Join(got, "\n")
			if (c.wantV4 == "") != (joined == "") || !strings.Contains(joined, c.wantV4) {
				t.Errorf("IPv4 findings %q, want %q", joined, c.wantV4)
			}
			if (s.V4.Unlisted != "") != c.unlisted || s.V4.RebuildOutput != c.rebuild {
				t.Errorf("unlisted %q rebuild %v, want %v %v", s.V4.Unlisted, s.V4.RebuildOutput, c.unlisted, c.rebuild)
			}
			if c.containment != "" && (len(s.Containment) != 1 || s.Containment["containment.kvm"] != (Section{Out: c.containment, RC: 3})) {
				t.Errorf("containment sections %+v, want only containment.kvm %q rc 3", s.Containment, c.containment)
			}
			if c.name == "legacy: no nft view" && (s.V4.NFTables || s.V6.NFTables) {
				t.Error("a legacy guest was treated as nf_tables")
			}
		})
	}
	// The remembered round trip: the guest skips it when its key matches; a key that
	// matches nothing remembered is a finding, never a silent pass.
	const key = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	empty := `{"nftables": []}`
	nfBase := base + sect("variant", "iptables v1.8.9 (nf_tables)", 0) + sect("nft", empty, 0) + sect("nfttext", "", 0) + sect("rtkey", key, 0)
	for _, c := range []struct {
		name   string
		out    string
		cache  *memRT
		want   string
		stored string
	}{
		{"made and remembered", nfBase + sect("rt", empty, 0), &memRT{}, "", key},
		{"skipped, remembered", nfBase, &memRT{key: key, body: empty}, "", ""},
		{"skipped, nothing remembered", nfBase, &memRT{}, "neither made nor remembered", ""},
		{"skipped, another key remembered", nfBase, &memRT{key: strings.Repeat("f", 64), body: empty}, "neither made nor remembered", ""},
		{"round trip failed", nfBase + sect("rt", "", 1) + sect("rt.stderr", "unshare: Operation not permitted", 0), &memRT{}, "unshare: Operation not permitted", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := TakeSnapshot(context.Background(), fixedRunner{c.out}, SnapshotRequest{Alias: "h", RoundTrips: c.cache})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range s.V4.Unaccounted {
				got = append(got, f.String())
			}
			j := strings.Join(got, "\n")
			if (c.want == "") != (j == "") || !strings.Contains(j, c.want) {
				t.Errorf("findings %q, want %q", j, c.want)
			}
			if c.stored != "" && c.cache.stored != c.stored {
				t.Errorf("stored key %q, want %q", c.cache.stored, c.stored)
			}
		})
	}

	// An incompatible table on a legacy guest is an error, not drift (nothing else can read it).
	if _, err := TakeSnapshot(context.Background(), fixedRunner{incompatible + sect("variant", "iptables v1.8.9 (legacy)", 0)}, SnapshotRequest{Alias: "h"}); err == nil {
		t.Error("a refused listing on a legacy guest was not an error")
	}
}

type memRT struct{ key, body, stored string }

func (m *memRT) Load() (string, string) { return m.key, m.body }
func (m *memRT) Store(key, body string) { m.stored = key }

// A chainless answer that lists the chain (or says the variant) is not trusted: the
// script never prints one, so it is a forgery or a broken script, and both are errors.
func TestChainlessAnswerChecked(t *testing.T) {
	listing := "-P OUTPUT ACCEPT"
	chain := listing + "\n-N LEVER_EGRESS"
	req := SnapshotRequest{Alias: "h", Short: true}
	for _, c := range []struct {
		name, out, want string
	}{
		{"chain listed", sect("filter4", chain, 0) + sect("filter6", listing, 0) + sect("alias4", "10.0.0.1 STREAM h", 0) + sect(SectionChainless, "", 0), "hold LEVER_EGRESS"},
		{"IPv6 chain listed", sect("filter4", listing, 0) + sect("filter6", chain, 0) + sect("alias4", "10.0.0.1 STREAM h", 0) + sect(SectionChainless, "", 0), "hold LEVER_EGRESS"},
		{"variant read", sect("filter4", listing, 0) + sect("filter6", listing, 0) + sect("alias4", "10.0.0.1 STREAM h", 0) + sect("variant", "iptables v1.8.9 (legacy)", 0) + sect(SectionChainless, "", 0), "hold LEVER_EGRESS or could not be listed"},
		{"control: a true chainless answer", sect("filter4", listing, 0) + sect("filter6", listing, 0) + sect("alias4", "10.0.0.1 STREAM h", 0) + sect(SectionChainless, "", 0), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := TakeSnapshot(context.Background(), fixedRunner{c.out}, req)
			if c.want == "" {
				if err != nil || !s.Chainless {
					t.Fatalf("err %v chainless %v", err, s.Chainless)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
		})
	}
}
