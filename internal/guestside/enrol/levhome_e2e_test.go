//go:build e2e

package enrol

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/testutil"
)

// TestEnrolHelperLevHomes attacks the one thing the enrol helper does as root on disk:
// making the lev homes and handing them to the run user. A path it is sent that leaves
// the lever roots, a component the run user owns or swapped for a symlink, or a private
// directory above lever's own part of the path, is refused with nothing made or opened;
// the clean layout (first row) gets root-owned 0711 dirs and run-user homes, 0700.
func TestEnrolHelperLevHomes(t *testing.T) {
	testutil.RequireRoot(t)
	const u = "lvtbhome"
	exec.Command("userdel", "--remove", u).Run()
	if out, err := exec.Command("useradd", "--user-group", u).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", "--remove", u).Run() })
	out, _ := exec.Command("id", "-u", u).Output()
	uid, _ := strconv.Atoi(strings.TrimSpace(string(out)))

	req := func(base, root string, agents ...string) Request {
		r := Request{UID: uid, LevHomeBase: base, LevHomeRoot: root}
		for _, a := range agents {
			r.Agents = append(r.Agents, Agent{Name: a, Dir: fmt.Sprintf("/run/user/%d/lever/agents/%s", uid, a),
				Bench: fmt.Sprintf("/run/user/%d/lever/bench/%s", uid, a), Home: filepath.Join(root, a)})
		}
		return r
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, top string) Request
		want  string // "" = made
	}{
		{"clean layout: made", func(t *testing.T, top string) Request {
			return req(top+"/state", top+"/state/guest/levhome", "manager", "worker-w1")
		}, ""},
		{"a component is a symlink", func(t *testing.T, top string) Request {
			os.MkdirAll(top+"/elsewhere", 0o755)
			os.MkdirAll(top+"/state", 0o700)
			os.Symlink(top+"/elsewhere", top+"/state/guest")
			return req(top+"/state", top+"/state/guest/levhome", "manager")
		}, "state/guest is not a directory only root can change"},
		{"a component the run user owns", func(t *testing.T, top string) Request {
			os.MkdirAll(top+"/state/guest", 0o700)
			os.Chown(top+"/state/guest", uid, uid)
			return req(top+"/state", top+"/state/guest/levhome", "manager")
		}, "state/guest is not a directory only root can change"},
		{"a group-writable component", func(t *testing.T, top string) Request {
			os.MkdirAll(top+"/state/guest", 0o700)
			os.Chmod(top+"/state/guest", 0o770)
			return req(top+"/state", top+"/state/guest/levhome", "manager")
		}, "is not a directory only root can change"},
		{"a private dir above lever's part", func(t *testing.T, top string) Request {
			os.MkdirAll(top+"/private/state", 0o700)
			os.Chmod(top+"/private", 0o700)
			return req(top+"/private/state", top+"/private/state/guest/levhome", "manager")
		}, "private (mode -rwx------) does not let the run user's podman pass through"},
		{"home outside the lev home root", func(t *testing.T, top string) Request {
			r := req(top+"/state", top+"/state/guest/levhome", "manager")
			r.Agents[0].Home = "/etc/lev"
			return r
		}, "are not the agent's own under the lever roots"},
		{"agent named ..", func(t *testing.T, top string) Request {
			return req(top+"/state", top+"/state/guest/levhome", "..")
		}, "are not the agent's own"},
		{"base not above the root", func(t *testing.T, top string) Request {
			return req("/etc", top+"/state/guest/levhome", "manager")
		}, "not an ancestor"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			os.Chmod(top, 0o755)
			os.Chmod(filepath.Dir(top), 0o755)
			r := tc.setup(t, top)
			err := checkAgentPaths(r)
			if err == nil {
				err = makeLevHomes(r)
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error containing %q", err, tc.want)
				}
				for _, a := range r.Agents {
					if _, serr := os.Lstat(a.Home); serr == nil && !strings.HasPrefix(a.Home, "/etc") {
						t.Errorf("refused, yet %s was made", a.Home)
					}
				}
				if fi, err := os.Stat(top + "/private"); err == nil && fi.Mode().Perm() != 0o700 {
					t.Errorf("a dir above lever's part was opened: %s", fi.Mode())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{top + "/state", top + "/state/guest", top + "/state/guest/levhome"} {
				fi, _ := os.Lstat(d)
				if fi == nil || fi.Mode().Perm()&0o011 != 0o011 || fi.Mode().Perm()&0o044 != 0o000 && d != top+"/state" || fi.Sys().(*syscall.Stat_t).Uid != 0 {
					t.Errorf("%s: %v", d, fi.Mode())
				}
			}
			for _, a := range r.Agents {
				fi, err := os.Lstat(a.Home)
				if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || int(fi.Sys().(*syscall.Stat_t).Uid) != uid {
					t.Errorf("%s: %v %v", a.Home, fi, err)
				}
			}
		})
	}
}
