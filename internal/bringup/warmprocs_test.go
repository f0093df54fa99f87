package bringup

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/levimage/debroot"
	"github.com/lever-jail/lever/internal/provision"
)

// fixedKey is the stub sha256sum's answer, so the remembered round-trip key matches.
const fixedKey = "5f0c6e5c3b0a1e2d4c6b8a9f0e1d2c3b4a5968778695a4b3c2d1e0f9a8b7c6d5"

type fixedRoundTrips struct{}

func (fixedRoundTrips) Load() (string, string) { return fixedKey, "{}" }
func (fixedRoundTrips) Store(string, string)   {}

// TestWarmObservationPrograms counts the programs a warm bring-up's one guest call starts
// (issue 30 item 3): under emulation (Lima on TCG) each costs 0.1-0.2 s, so the count is
// what the warm up's time follows. The observation and snapshot script runs here with a
// PATH of stubs that log their names and answer as a guest whose chains are in place and
// whose round trip is remembered (the warm case); a program the list does not expect,
// or one the script cannot find, fails the test. docs/bringup.md ("The warm call's
// programs") keeps the list and the count before this change (33 on netns, strace).
func TestWarmObservationPrograms(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	logf := filepath.Join(dir, "programs")
	listing := "-P OUTPUT ACCEPT\n-N LEVER_EGRESS\n-A OUTPUT -j LEVER_EGRESS\n-A LEVER_EGRESS -j DROP"
	// Each stub logs its name, then answers as the warm guest would. The stubs use shell
	// builtins only: a stub that ran cat would be counted too.
	stubs := map[string]string{
		"mktemp":    `: >"$STUBDIR/err"; echo "$STUBDIR/err"`,
		"stat":      `echo "0 644"`,
		"cat":       `echo "Package: base-files"`,
		"sha256sum": `while read -r l; do :; done; echo "` + fixedKey + `  -"`,
		"find":      `:`,
		"sort":      `while read -r l; do echo "$l"; done`,
		"iptables":  `case "$*" in *-V*) echo "iptables v1.8.9 (nf_tables)" ;; *) printf '%s\n' "` + listing + `" ;; esac`,
		"ip6tables": `printf '%s\n' "` + listing + `"`,
		"timeout":   `shift; exec "$@"`,
		"getent":    `echo "10.0.0.1 STREAM host.lever.internal"; echo "fd00::1 STREAM"`,
		"nft":       `case "$*" in *-j*) echo '{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "x", "json_schema_version": 1}}]}' ;; *) echo "table ip filter { # handle 1" ;; esac`,
		"rm":        `:`,
		"id":        `echo 1000`,
	}
	for name, body := range stubs {
		sh := "#!/bin/sh\necho " + name + " >>\"$STUBLOG\"\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(bin, name), []byte(sh), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	req := guest.SnapshotRequest{Alias: "host.lever.internal", RoundTrips: fixedRoundTrips{}, Short: true}
	sc := guest.NewScript(append([]string{provision.StampPart, debroot.StateDigestPart, observePart}, append(guest.SnapshotParts(req), "exit 0")...)...)
	// root is in /etc/passwd: the uid is read without id, as for lever's run user
	cmd := exec.Command("/bin/sh", "-s", "--", filepath.Join(dir, "stamp"), "root", filepath.Join(dir, "levhome"), "manager")
	cmd.Env = append([]string{"PATH=" + bin, "STUBLOG=" + logf, "STUBDIR=" + dir, "LEVER_TREES=" + filepath.Join(dir, "trees")}, guest.SnapshotEnv(req)...)
	cmd.Stdin = strings.NewReader(sc.Text())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, stderr.String())
	}
	secs, err := sc.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	// positive control: the answer is a warm guest's, read whole
	for _, name := range []string{"stamp", "uid", "podman", "statussum", "filter4", "filter6", "alias4", "alias6", "variant", "nft", "nfttext", "rtkey"} {
		if !secs.Has(name) {
			t.Errorf("section %s missing; stderr: %s", name, stderr.String())
		}
	}
	if secs.Has("rt") || secs.Has(guest.SectionChainless) {
		t.Errorf("the warm answer made the round trip or was read short: %v", secs)
	}
	if got := strings.TrimSpace(secs["rtkey"].Out); got != fixedKey {
		t.Errorf("rtkey %q", got)
	}
	if a4, a6 := secs["alias4"], secs["alias6"]; a4.RC != 0 || !strings.HasPrefix(a4.Out, "10.0.0.1 ") || a6.RC != 0 || !strings.HasPrefix(a6.Out, "fd00::1 ") {
		t.Errorf("one lookup split by family: alias4 %+v alias6 %+v", a4, a6)
	}
	if uid := strings.TrimSpace(secs["uid"].Out); uid != "0" {
		t.Errorf("uid %q, want 0 (root, from /etc/passwd)", uid)
	}
	raw, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	progs := strings.Fields(string(raw))
	want := []string{
		"mktemp",                           // the sections prelude's stderr file
		"stat",                             // the stamp's owner and mode
		"cat", "find", "sort", "sha256sum", // the package-state digest (byte for byte debroot.StateDigest)
		"iptables", "ip6tables", // both filter tables
		"timeout", "getent", // the host alias, both families in one lookup
		"iptables",   // the variant
		"nft", "nft", // the nft view, JSON and text
		"sha256sum", // the round-trip key
		"rm",        // the prelude's trap
	}
	// a pipeline's programs start in either order: compare them sorted
	sort.Strings(want)
	sorted := append([]string(nil), progs...)
	sort.Strings(sorted)
	if d := cmp.Diff(want, sorted); d != "" {
		t.Errorf("programs the warm observation started (-want +got):\n%s", d)
	}
	t.Logf("%d programs: %s", len(progs), strings.Join(progs, " "))
}
