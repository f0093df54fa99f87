package egress

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var variants = []string{"nft", "legacy"}

func readCapture(t *testing.T, variant, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "captured", variant, name))
	if err != nil {
		t.Fatalf("capture missing (run `sh testdata/capture.sh` as root): %v", err)
	}
	return string(b)
}

func liveFrom(t *testing.T, variant, name string) (FamilyState, FamilyState) {
	t.Helper()
	v4, err := ParseFamily(V4, readCapture(t, variant, name+".v4"))
	if err != nil {
		t.Fatal(err)
	}
	v6, err := ParseFamily(V6, readCapture(t, variant, name+".v6"))
	if err != nil {
		t.Fatal(err)
	}
	return v4, v6
}

// TestCapturedListingsMatchRender: what real iptables printed back after loading each
// rendered ruleset verifies as an exact match, for both variants. This is the proof that
// rendering uses iptables' own print-back form.
func TestCapturedListingsMatchRender(t *testing.T) {
	for _, v := range variants {
		for _, tc := range renderCases {
			t.Run(v+"/"+tc.name, func(t *testing.T) {
				rs, err := Render(tc.in)
				if err != nil {
					t.Fatal(err)
				}
				v4, v6 := liveFrom(t, v, tc.name)
				d := Compare(rs, v4, v6)
				if !d.Match() {
					t.Fatalf("live listing does not verify:\n%s", strings.Join(d.Lines(), "\n"))
				}
				if got, want := LiveClosed(v4, v6), tc.in.Posture == Closed; got != want {
					t.Errorf("LiveClosed = %v, want %v", got, want)
				}
				a4, err := ReadAlias(V4, v4.Chain)
				if err != nil || a4 != tc.in.AliasV4 {
					t.Errorf("ReadAlias(IPv4) = %v, %v; want %v", a4, err, tc.in.AliasV4)
				}
				a6, err := ReadAlias(V6, v6.Chain)
				if err != nil || a6 != tc.in.AliasV6 {
					t.Errorf("ReadAlias(IPv6) = %v, %v; want %v", a6, err, tc.in.AliasV6)
				}
			})
		}
	}
}

func TestCapturedFreshNamespace(t *testing.T) {
	rs, _ := Render(Inputs{Posture: Open, AliasV4: a("10.77.0.1")})
	for _, v := range variants {
		t.Run(v, func(t *testing.T) {
			v4, v6 := liveFrom(t, v, "fresh")
			d := Compare(rs, v4, v6)
			want := []string{
				"IPv4: chain LEVER_EGRESS missing", "IPv4: jump missing from OUTPUT",
				"IPv6: chain LEVER_EGRESS missing", "IPv6: jump missing from OUTPUT",
			}
			if diff := cmp.Diff(want, d.Lines()); diff != "" {
				t.Errorf("diff lines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCapturedTampered(t *testing.T) {
	var in Inputs
	for _, tc := range renderCases {
		if tc.name == "open-v4v6-ports" {
			in = tc.in
		}
	}
	rs, _ := Render(in)
	for _, v := range variants {
		t.Run(v, func(t *testing.T) {
			v4, v6 := liveFrom(t, v, "tampered")
			d := Compare(rs, v4, v6)
			want := Diff{
				V4: FamilyDiff{Family: "IPv4", JumpNotFirst: true, JumpDuplicated: true, JumpCopies: 2,
					AheadOfJump: []string{"-A OUTPUT -d 198.51.100.7/32 -j ACCEPT"},
					Rules: []RuleDiff{
						{Kind: Changed, Want: "-A LEVER_EGRESS -d 10.77.0.1/32 -p tcp -m tcp --dport 1 -j ACCEPT", Got: "-A LEVER_EGRESS -d 10.77.0.1/32 -p tcp -m tcp --dport 3001 -j ACCEPT", WantPos: 1, GotPos: 1},
						{Kind: Missing, Want: "-A LEVER_EGRESS -d 10.77.0.1/32 -p tcp -m tcp --dport 3000 -j ACCEPT", WantPos: 2},
						{Kind: Extra, Got: "-A LEVER_EGRESS -d 198.51.100.7/32 -j ACCEPT", GotPos: 14},
					}},
				V6:          FamilyDiff{Family: "IPv6", JumpCopies: 1},
				HalfApplied: true,
			}
			if diff := cmp.Diff(want, d); diff != "" {
				t.Errorf("diff (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCapturedLimaDNS(t *testing.T) {
	for _, v := range variants {
		t.Run(v, func(t *testing.T) {
			got, addrs, err := ParseLimaDNS(readCapture(t, v, "limadns.nat"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]ProtoPort{{"udp", 35845}, {"tcp", 35845}}, got); diff != "" {
				t.Errorf("targets (-want +got):\n%s", diff)
			}
			for _, ad := range addrs {
				if ad != netip.MustParseAddr("192.168.5.2") {
					t.Errorf("target address %v", ad)
				}
			}
		})
	}
}

func TestParseTableRejectsGarbage(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"unknown flag", "-P OUTPUT ACCEPT\n-X FOO\n", `line 2: unrecognised "-X FOO"`},
		{"bare -A", "-A\n", `line 1: unrecognised "-A"`},
		{"short -P", "-P OUTPUT\n", `line 1: unrecognised "-P OUTPUT"`},
		{"error text", "iptables: No chain/target/match by that name.\n", `line 1: unrecognised`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTable(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// nft's warning comment is not a rule.
	tb, err := ParseTable("# Warning: iptables-legacy tables present, use iptables-legacy to see them\n-P OUTPUT ACCEPT\n")
	if err != nil || tb.Policies["OUTPUT"] != "ACCEPT" {
		t.Fatalf("comment handling: %v %+v", err, tb)
	}
}
