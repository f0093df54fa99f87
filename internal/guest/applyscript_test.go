package guest

import (
	"net/netip"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/egress"
)

// TestApplyScriptOrder: jump commits per family, then chain commits IPv6 first and IPv4
// last, each with its family's restore binary; the jump commit deletes exactly the copies
// the snapshot saw and declares the chain only where it is missing.
func TestApplyScriptOrder(t *testing.T) {
	rs, _ := egress.Render(egress.Inputs{Posture: egress.Open, AliasV4: netip.MustParseAddr("10.0.0.1")})
	snap := Snapshot{
		V4: egress.FamilyState{ChainExists: true, Output: []string{"-A OUTPUT -o lo -j ACCEPT", egress.JumpRule, egress.JumpRule}},
		V6: egress.FamilyState{ChainExists: false},
	}
	tools := Tools{IPTablesRestore: "/x/r4", IP6TablesRestore: "/x/r 6'q"}
	script := ApplyScript(tools, snap, rs)
	steps := regexp.MustCompile(`(?m)^sec (\w+) (.+) -w --noflush <<'LEVER_EOF'\n((?s:.*?))LEVER_EOF$`).FindAllStringSubmatch(script, -1)
	var got [][3]string
	for _, m := range steps {
		got = append(got, [3]string{m[1], m[2], m[3]})
	}
	want := [][3]string{
		{"j6", `'/x/r 6'\''q'`, egress.JumpRestore(false, 0)},
		{"j4", `'/x/r4'`, "*filter\n-D OUTPUT -j LEVER_EGRESS\n-D OUTPUT -j LEVER_EGRESS\n-I OUTPUT 1 -j LEVER_EGRESS\nCOMMIT\n"},
		{"c6", `'/x/r 6'\''q'`, egress.ChainRestore(rs.V6)},
		{"c4", `'/x/r4'`, egress.ChainRestore(rs.V4)},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("apply steps (-want +got):\n%s", d)
	}
	if !strings.Contains(egress.JumpRestore(false, 0), ":LEVER_EGRESS - [0:0]") || strings.Contains(egress.JumpRestore(true, 1), ":LEVER_EGRESS") {
		t.Error("jump commit must declare the chain only when it is missing")
	}
}

// TestRebuildSectionsDistinct: the rebuild's one script answers in the commits' sections,
// the snapshot's and ReadBackDone, and no two of them share a name (were they to, Parse
// would refuse the answer as a section printed twice). The assembled script, the nft
// variant of the jump commit and a containment part included, parses in sh and passes
// shellcheck.
func TestRebuildSectionsDistinct(t *testing.T) {
	names := map[string]string{ReadBackDone: "the read-back's end"}
	for _, s := range applySteps {
		for _, n := range []string{s.id, s.id + ".stderr"} {
			if names[n] != "" {
				t.Errorf("section %s twice", n)
			}
			names[n] = "commit " + s.id
		}
	}
	snapNames := regexp.MustCompile(`(?m)^\s*(?:if .*; then )?(?:else )?(?:secv|sec|put) ([a-z0-9.-]+)`).FindAllStringSubmatch(snapshotPart, -1)
	if len(snapNames) < 10 {
		t.Fatalf("found only %d sections in snapshot.sh: %v", len(snapNames), snapNames)
	}
	for _, m := range snapNames {
		for _, n := range []string{m[1], m[1] + ".stderr"} {
			if was := names[n]; was != "" && was != "snapshot" {
				t.Errorf("snapshot section %s is also %s's", n, was)
			}
			names[n] = "snapshot"
		}
		if strings.HasPrefix(m[1], ContainmentPrefix) {
			t.Errorf("snapshot section %s is in the containment part's namespace", m[1])
		}
	}
	for n := range names {
		if strings.HasPrefix(n, ContainmentPrefix) {
			t.Errorf("section %s is in the containment part's namespace", n)
		}
	}

	rs, _ := egress.Render(egress.Inputs{Posture: egress.Closed, AliasV4: netip.MustParseAddr("10.0.0.1")})
	snap := Snapshot{V4: egress.FamilyState{ChainExists: true, RebuildOutput: true}, V6: egress.FamilyState{Output: []string{egress.JumpRule}}}
	req := SnapshotRequest{Alias: "h", LimaDNS: true, Containment: "put " + ContainmentPrefix + "x yes\n"}
	text := rebuildScript(req, snap, rs).Text()
	if !strings.HasSuffix(strings.TrimSpace(text), "put "+ReadBackDone) {
		t.Errorf("the script does not end with its read-back's end:\n%s", text)
	}
	check := exec.Command("sh", "-n")
	check.Stdin = strings.NewReader(text)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v: %s", err, out)
	}
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Log("shellcheck not installed: sh -n only")
		return
	}
	check = exec.Command("shellcheck", "-s", "sh", "-S", "warning", "-")
	check.Stdin = strings.NewReader(text)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}
