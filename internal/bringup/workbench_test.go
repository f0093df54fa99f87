package bringup

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
)

// TestBuildDebianBenchRefusals: what the guest's package read returns decides before any
// image is touched (the client is nil here: reaching it would panic).
func TestBuildDebianBenchRefusals(t *testing.T) {
	secs := func(statussum string, names ...string) guesttest.Reply {
		return guesttest.Sections(func(guest.Cmd) []guesttest.Sec {
			all := map[string]guesttest.Sec{"arch": {Out: "amd64"}, "statussum": {Out: statussum},
				"status": {Out: "Package: dash\nStatus: install ok installed\nArchitecture: amd64\n"}}
			var out []guesttest.Sec
			for _, n := range names {
				s := all[n]
				s.Name = n
				out = append(out, s)
			}
			return out
		})
	}
	full := []string{"arch", "statussum", "status", "lists", "rootlinks", "altlinks", "certs", "end"}
	cases := []struct {
		name  string
		reply guesttest.Reply
		want  string
	}{
		{"no dpkg database", guesttest.Exit(3, "no /var/lib/dpkg/status: not a Debian-family guest"),
			"set lev.base_image or lev.base_tarball in /p/lever.yaml"},
		{"read failed", guesttest.Exit(1, "boom"), "exit 1: boom"},
		{"cut-off output", secs(strings.Repeat("a", 64), "arch", "statussum", "status"), "incomplete"},
		{"no status digest", secs("", full...), "no dpkg status digest"},
		{"well-formed read (positive control)", secs(strings.Repeat("a", 64), full...), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := (&guesttest.Runner{}).On("gather", guesttest.Script("sec statussum state_digest"), tc.reply)
			in := &Instance{cfg: &config.Config{Path: "/p/lever.yaml"}, Runner: &guest.Counting{Inner: r}}
			if tc.want == "" {
				// positive control: a well-formed read gets past the guest checks and on to
				// podman (the nil client), so the refusals above are decided by the read.
				defer func() {
					if recover() == nil {
						t.Error("a well-formed read did not reach the image store")
					}
				}()
			}
			_, _, facts, err := in.buildDebianBench(context.Background(), nil, Facts{}, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if n := r.Names(); len(n) != 1 || n[0] != "gather" {
				t.Errorf("guest calls %v", n)
			}
			if facts.StatusSum != "" {
				t.Errorf("status digest %q kept from a refused read", facts.StatusSum)
			}
		})
	}
}

// TestGuestTarNamesAreNeverOptions runs the guest tar command (GNU tar, as in the guest)
// on a list whose first name is a tar option allowed in file lists: "--recursion" would
// turn recursion back on, so a planned directory would bring everything under it (files
// the plan left out: secrets, documentation). Each name is archived as a file and nothing
// else is. The control row drops --verbatim-files-from and shows the same list does leak.
func TestGuestTarNamesAreNeverOptions(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar")
	}
	for _, tc := range []struct {
		name   string
		unsafe bool
	}{{"lever's argv", false}, {"without --verbatim-files-from (control)", true}} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, "sub"), 0o755)
			for _, n := range []string{"--recursion", "plain", "sub/secret"} {
				os.WriteFile(filepath.Join(root, n), []byte("x"), 0o644)
			}
			names := []string{"--recursion", "sub", "plain"}
			argv := guestTarArgv(root)
			if tc.unsafe {
				var a []string
				for _, x := range argv {
					if x != "--verbatim-files-from" {
						a = append(a, x)
					}
				}
				argv = a
			}
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("tar: %v", err)
			}
			listed := map[string]bool{}
			tr := tar.NewReader(bytes.NewReader(out))
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				listed[strings.TrimSuffix(h.Name, "/")] = true
			}
			if leaked := listed["sub/secret"]; leaked != tc.unsafe {
				t.Fatalf("sub/secret archived = %v, want %v (archive %v)", leaked, tc.unsafe, listed)
			}
			if tc.unsafe {
				return
			}
			for _, n := range names {
				if !listed[n] {
					t.Errorf("%q not archived as a file (archive has %v)", n, listed)
				}
			}
		})
	}
}
