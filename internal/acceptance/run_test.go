package acceptance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guestside/probes"
	"github.com/lever-jail/lever/internal/levimage/levtest"
)

// recorder answers the helper with a canned answer (its egress snapshot failed), and
// keeps every command.
// With missing set, the guest has no cached lev until an install call brings it.
type recorder struct {
	cmds    []guest.Cmd
	missing bool
}

func (r *recorder) Run(_ context.Context, c guest.Cmd) (guest.Result, error) {
	r.cmds = append(r.cmds, c)
	script := strings.Join(c.Argv, " ")
	if strings.Contains(script, "sha256sum -c") {
		r.missing = false
		return guest.Result{}, nil
	}
	if r.missing && strings.Contains(script, "no cached lev") {
		return guest.Result{ExitCode: 113, Stderr: []byte("lever: no cached lev")}, nil
	}
	// The request follows lev's bytes on stdin; the probes are aimed as the real helper
	// aims them when the snapshot names no alias.
	var req Request
	if i := bytes.LastIndex(c.Stdin, []byte(`{"probes"`)); i >= 0 {
		_ = json.Unmarshal(c.Stdin[i:], &req)
	}
	resp := Response{RunUID: -1, Scanned: 3, ScannedBytes: 4096, RootOnlyFiles: 7, RootOnlyBytes: 3 << 20, Changed: 2, Probed: probes.Aim(req.Probes, "", ""),
		Snapshot: &guest.CarriedAnswer{Stderr: "no iptables here", RC: 1}}
	b, _ := json.Marshal(resp)
	return guest.Result{Stdout: b}, nil
}

// TestRunSendsLevForGuestAndNoKey: acceptance's one helper call into a VM carries the
// Linux lev it was given (an arm64 guest: lev-linux-arm64's bytes, whatever lever runs
// on), started as `__guest probe`; and no guest command carries the API key, raw or
// base64, while the search for it (its anchor and digest) does reach the helper.
func TestRunSendsLevForGuestAndNoKey(t *testing.T) {
	arm := levtest.Binary(t, "linux", "arm64")
	lev, _ := os.ReadFile(arm)
	key := []byte("sk-ant-api03-Zq8v1Lk2Wm3Xn4Yo5Zp6Aq7Br8Cs9Dt0Eu1Fv2Gw3Hx4Iy5Jz6")
	// a guest without lever's lev yet: the helper call finds none, lever installs the
	// one it was given and calls again
	r := &recorder{missing: true}
	rep, err := Run(context.Background(), Env{Instance: "t", Backend: "fakevm", Runner: r, Secrets: [][]byte{key},
		HelperLev: arm, Expect: Expect{Targets: DefaultTargets()}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.cmds) != 3 {
		t.Fatalf("%d guest calls, want 3 (the helper, the install of lev, the helper again)", len(r.cmds))
	}
	sum := sha256.Sum256(lev)
	if !bytes.Equal(r.cmds[1].Stdin, lev) {
		t.Fatalf("the install call carries %d bytes, not the arm64 lev's %d", len(r.cmds[1].Stdin), len(lev))
	}
	h := r.cmds[2]
	if got := strings.Join(h.Argv, " "); !strings.Contains(got, "/lev-"+hex.EncodeToString(sum[:16])+";") || !strings.HasSuffix(got, `exec "$f" __guest probe`) {
		t.Fatalf("helper call %q does not run the arm64 lev it was given", h.Argv)
	}
	req := h.Stdin
	digest := sha256.Sum256(key)
	if !bytes.Contains(req, []byte(hex.EncodeToString(digest[:]))) {
		t.Fatal("the key's digest did not reach the helper: the search was not requested")
	}
	for _, c := range r.cmds {
		all := append([]byte(strings.Join(c.Argv, " ")), c.Stdin...)
		for _, spelled := range [][]byte{key, key[8:], []byte(base64.StdEncoding.EncodeToString(key)), []byte(base64.StdEncoding.EncodeToString(key))[8:]} {
			if bytes.Contains(all, spelled) {
				t.Fatalf("a guest command carries the key (%q)", spelled[:12])
			}
		}
	}
	var d string
	for _, x := range rep.Results {
		if x.ID == "no-api-key" {
			d = x.Detail
		}
	}
	if !strings.Contains(d, "3 files, 4.0 KiB") || !strings.Contains(d, "7 files (3.0 MiB) in root-only package trees") ||
		!strings.Contains(d, "2 files gone or no longer regular files when read") {
		t.Fatalf("no-api-key detail %q does not print what was read and what was left unread", d)
	}
	// A VM is searched whole; only the package-managed trees are root-only, never a place
	// lever or the run user writes.
	var sent Request
	if err := json.Unmarshal(req, &sent); err != nil || sent.Scan == nil {
		t.Fatalf("request: %v", err)
	}
	if strings.Join(sent.Scan.Roots, ",") != "/,/dev/shm" || strings.Join(sent.Scan.RootOnly, ",") != strings.Join(RootOnlyTrees, ",") {
		t.Fatalf("VM scan roots %v, root-only %v", sent.Scan.Roots, sent.Scan.RootOnly)
	}
	for _, p := range sent.Scan.RootOnly {
		for _, writable := range []string{"/usr/local", "/etc", "/home", "/root", "/tmp", "/var/tmp", "/run", "/var/lib/lever", "/var/lib/containers", "/lever"} {
			if p == writable || strings.HasPrefix(writable+"/", p+"/") || strings.HasPrefix(p+"/", writable+"/") {
				t.Errorf("root-only tree %s overlaps %s, which lever or the run user writes", p, writable)
			}
		}
	}
}

// The default workbench's trees (root's, made by lever's image helper from the guest's
// package files) are searched like the package trees: the request names them as
// root-only (the helper still reads any file in them a non-root user could have written)
// and the report says they were among the trees left unread.
func TestRunRootOnlyWorkbenchTrees(t *testing.T) {
	arm := levtest.Binary(t, "linux", "arm64")
	r := &recorder{}
	rep, err := Run(context.Background(), Env{Instance: "t", Backend: "fakevm", Runner: r, Secrets: [][]byte{[]byte("sk-ant-api03-0123456789abcdef")},
		HelperLev: arm, Expect: Expect{Targets: DefaultTargets()}, RootOnly: []string{"/var/lib/lever/t/workbench"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.cmds) != 1 {
		t.Fatalf("%d guest calls, want 1 (lev is in the guest's cache)", len(r.cmds))
	}
	var sent Request
	if err := json.Unmarshal(r.cmds[0].Stdin, &sent); err != nil || sent.Scan == nil {
		t.Fatalf("request: %v", err)
	}
	if got := strings.Join(sent.Scan.RootOnly, ","); got != strings.Join(RootOnlyTrees, ",")+",/var/lib/lever/t/workbench" {
		t.Fatalf("root-only trees %s", got)
	}
	for _, x := range rep.Results {
		if x.ID == "no-api-key" && !strings.Contains(x.Detail, "/var/cache/apt, /var/lib/lever/t/workbench) not read") {
			t.Errorf("no-api-key detail %q does not name the workbench's trees", x.Detail)
		}
	}
}
