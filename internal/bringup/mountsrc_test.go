package bringup

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
	"github.com/lever-jail/lever/internal/guestside"
	"github.com/lever-jail/lever/internal/guestside/mountcheck"
)

// mountsJail is an Instance whose guest answers the mounts helper with reply, recording
// each request.
func mountsJail(t *testing.T, tree string, reply guesttest.Reply) (*Instance, *[]mountcheck.Request) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var reqs []mountcheck.Request
	r := &guesttest.Runner{}
	r.On("mounts", guesttest.Script(guestside.Command+"\x00"+guestside.ModeMounts), func(c guest.Cmd) (guest.Result, error) {
		var req mountcheck.Request
		if err := json.Unmarshal(c.Stdin, &req); err != nil {
			t.Errorf("the helper's request: %v", err)
		}
		reqs = append(reqs, req)
		return reply(c)
	})
	in := &Instance{Runner: &guest.Counting{Inner: r}, TreeSrc: tree, InPlace: true, helper: &guestside.Helper{Lev: exe, InPlace: true}}
	return in, &reqs
}

// TestCheckMountsAsksForEveryInTreeMount: the helper is asked about every mount below the
// tree (a worker's dir, lever.yaml, a .git), with where the container has each, and about
// nothing else (the tree itself is lever's guest path; lev's own dirs lie outside it); a
// container with no such mount costs no guest call.
func TestCheckMountsAsksForEveryInTreeMount(t *testing.T) {
	tree := "/srv/proj"
	in, reqs := mountsJail(t, tree+"/", guesttest.OK(""))
	ct := containers.Container{Name: "c", Mounts: []containers.Mount{
		{Source: tree, Dest: "/lever"},
		{Source: tree + "/lever.yaml", Dest: "/lever/lever.yaml", ReadOnly: true},
		{Source: tree + "/wa/.git", Dest: "/lever/wa/.git", ReadOnly: true},
		{Source: tree + "x/elsewhere", Dest: "/lever/x"}, // shares the prefix, not the tree
		{Source: "/run/user/1000/lever/agents/manager", Dest: "/run/lever", ReadOnly: true},
	}}
	if err := in.checkMounts(context.Background(), ct, 77); err != nil {
		t.Fatal(err)
	}
	want := []mountcheck.Request{{Pid: 77, Tree: tree, Mounts: []mountcheck.Mount{
		{Rel: "lever.yaml", Dest: "/lever/lever.yaml", ReadOnly: true}, {Rel: "wa/.git", Dest: "/lever/wa/.git", ReadOnly: true},
	}}}
	if !reflect.DeepEqual(*reqs, want) {
		t.Fatalf("requests %+v, want %+v", *reqs, want)
	}
	if err := in.checkMounts(context.Background(), containers.Container{Name: "d", Mounts: []containers.Mount{{Source: tree, Dest: "/lever"}, {Source: "/run/x", Dest: "/run/lever"}}}, 77); err != nil || len(*reqs) != 1 {
		t.Fatalf("a container with no in-tree mount: err %v, %d calls", err, len(*reqs))
	}
}

// TestCheckMountsRefusalQuotesTheTarget: the refusal names where the agent's symlink
// resolves, a name the agent chose; one holding an escape sequence (OSC 52, erase line,
// CR, an 8-bit CSI) reaches lever's error quoted, with no byte a terminal obeys. The
// control is a plain target, named as it is. (mountcheck's tests prove the refusal
// itself; here the guest answers with it as lev prints an error.)
func TestCheckMountsRefusalQuotesTheTarget(t *testing.T) {
	cases := []struct {
		name   string
		target string // the directory the worker's dir is swapped for a link to
		want   string // in the error
	}{
		{"plain target", "run-user", "run-user through a symlink"},
		{"target named with escapes", "x\x1b]52;c;eA==\x07\x1b[2K\r\u009b2J\x7f", `x\x1b]52;c;eA==\a\x1b[2K\r\u009b2J\x7f through a symlink`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			tree := filepath.Join(root, "tree")
			outside := filepath.Join(root, c.target)
			for _, d := range []string{filepath.Join(tree, "workers"), outside} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(outside, filepath.Join(tree, "workers", "evil")); err != nil {
				t.Fatal(err)
			}
			// What lev's __guest prints for mountcheck's refusal of this tree.
			stderr := "lev: mount source " + filepath.Join(tree, "workers", "evil") + " resolves to " + outside + " through a symlink\n"
			in, _ := mountsJail(t, tree, guesttest.Exit(1, stderr))
			err := in.checkMounts(context.Background(), containers.Container{Name: "c", Mounts: []containers.Mount{{Source: filepath.Join(tree, "workers", "evil"), Dest: "/lever/workers/evil"}}}, 77)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal naming %q", err, c.want)
			}
			if i := strings.IndexFunc(err.Error(), func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) }); i >= 0 {
				t.Errorf("a control in the error at %q", err.Error()[i:])
			}
		})
	}
}
