//go:build e2e

package provision

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/testutil"
)

type nsRunner struct{ ns string }

func (r nsRunner) Run(ctx context.Context, c guest.Cmd) (guest.Result, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", r.ns}, c.Argv...)...)
	cmd.Stdin = bytes.NewReader(c.Stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	res := guest.Result{Stdout: o.Bytes(), Stderr: e.Bytes()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.ExitCode = ee.ExitCode()
		return res, nil
	}
	return res, err
}

// TestProvisionIdempotentAndStamped provisions a run user for real in a namespace it made,
// then shows: the second run changes nothing, the stamp makes Ensure skip, and a stamp
// that is not root-owned or names another boot does not.
func TestProvisionIdempotentAndStamped(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireTool(t, "podman")
	b := make([]byte, 3)
	rand.Read(b)
	name := "lvtbp" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", name).Run()
		exec.Command("pkill", "-KILL", "-u", name).Run()
		exec.Command("userdel", "--remove", name).Run()
		for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
			if b, _ := os.ReadFile(f); !strings.Contains("\n"+string(b), "\n"+name+":") {
				continue // userdel removed it (a rewrite would race other writers)
			}
			data, _ := os.ReadFile(f)
			var keep []string
			for _, l := range strings.Split(string(data), "\n") {
				if l != "" && !strings.HasPrefix(l, name+":") {
					keep = append(keep, l+"\n")
				}
			}
			os.WriteFile(f, []byte(strings.Join(keep, "")), 0o644)
		}
	})
	r := &guest.Counting{Inner: nsRunner{ns: name}}
	ctx := context.Background()
	p := Params{RunUser: name, Stamp: filepath.Join(t.TempDir(), "lever", "provision.stamp")}

	first, err := Ensure(ctx, r, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll("/run/user/" + itoa(first.UID)) })
	joined := strings.Join(first.Changes, "\n")
	// (useradd itself may allocate the subordinate ranges, so those are checked below.)
	for _, want := range []string{"created run user " + name, "stamp "} {
		if !strings.Contains(joined, want) {
			t.Errorf("first run's changes lack %q:\n%s", want, joined)
		}
	}
	// A second full run (no stamp shortcut) changes nothing.
	again, err := Run(ctx, r, p, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Changes) != 0 {
		t.Errorf("second run changed: %v", again.Changes)
	}
	// The package check reads dpkg once for every name: an alternative with one installed
	// member is satisfied, an unknown name is missing (and its install fails here: the
	// namespace has no network, and apt has no such package).
	for _, tc := range []struct {
		pkgs []string
		err  string
	}{
		{[]string{"lever-no-such-pkg|git", "coreutils"}, ""},
		{[]string{"coreutils", "lever-no-such-pkg"}, "installing packages lever-no-such-pkg failed"},
	} {
		q := p
		q.Packages = tc.pkgs
		res, err := Run(ctx, r, q, false)
		if tc.err == "" && (err != nil || strings.Contains(strings.Join(res.Changes, "\n"), "installing")) {
			t.Errorf("packages %v: %v, changes %v (want no install: each is there)", tc.pkgs, err, res.Changes)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("packages %v: %v, want %q", tc.pkgs, err, tc.err)
		}
	}
	if _, err := Run(ctx, r, p, false); err != nil { // the stamp back to p's
		t.Fatal(err)
	}
	// With the stamp current, Ensure skips in exactly one guest call (the read).
	r.Reset()
	res, err := Ensure(ctx, r, p, nil)
	if err != nil || !res.Skipped || r.Calls() != 1 {
		t.Errorf("Ensure with a current stamp: skipped=%v calls=%d err=%v", res.Skipped, r.Calls(), err)
	}
	// Attacks on the stamp: each makes the next Ensure run the script again.
	attacks := []struct {
		name string
		do   func()
	}{
		{"stamp handed to the run user", func() { os.Chown(p.Stamp, first.UID, first.UID) }},
		{"stamp made group-writable", func() { os.Chmod(p.Stamp, 0o664) }},
		{"stamp names another boot", func() {
			data, _ := os.ReadFile(p.Stamp)
			f := strings.Fields(string(data))
			os.WriteFile(p.Stamp, []byte(f[0]+" 00000000-0000-0000-0000-000000000000\n"), 0o644)
		}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			a.do()
			r.Reset()
			res, err := Ensure(ctx, r, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Skipped || r.Calls() != 2 {
				t.Fatalf("tampered stamp honoured: skipped=%v calls=%d", res.Skipped, r.Calls())
			}
			st, _ := os.Stat(p.Stamp)
			if st.Mode().Perm() != 0o644 {
				t.Errorf("stamp mode %v after repair", st.Mode().Perm())
			}
		})
	}
	// Attack: the run user swaps its containers.conf for a symlink to a root-owned file.
	// Provisioning rewrites the conf (it differs), and must do so without root's powers.
	t.Run("containers.conf symlinked at a root file", func(t *testing.T) {
		victim := filepath.Join(t.TempDir(), "victim")
		os.Chmod(filepath.Dir(victim), 0o755)
		if err := os.WriteFile(victim, []byte("root's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		home := "/home/" + name
		if out, err := exec.Command("getent", "passwd", name).Output(); err == nil {
			home = strings.Split(strings.TrimSpace(string(out)), ":")[5]
		}
		conf := filepath.Join(home, ".config", "containers", "containers.conf")
		os.Remove(conf)
		if err := os.Symlink(victim, conf); err != nil {
			t.Fatal(err)
		}
		Run(ctx, r, p, false) // may fail: the run user cannot write the target
		if b, _ := os.ReadFile(victim); string(b) != "root's\n" {
			t.Fatalf("provisioning wrote through the planted symlink: victim now %q", b)
		}
		os.Remove(conf)
		if _, err := Run(ctx, r, p, false); err != nil {
			t.Fatalf("provisioning after the link is gone: %v", err)
		}
	})
	// The run user exists with a 65536-id subordinate range and a private runtime dir.
	sub, _ := os.ReadFile("/etc/subuid")
	if !strings.Contains(string(sub), name+":") || !strings.Contains(string(sub), ":65536") {
		t.Errorf("/etc/subuid lacks %s's range", name)
	}
	st, err := os.Stat("/run/user/" + itoa(first.UID))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("runtime dir: %v %v", st, err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
