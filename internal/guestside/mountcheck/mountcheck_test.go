//go:build linux

package mountcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck runs the comparison against a directory standing for the container's root:
// a file reached there by a hard link is the same inode as the tree's (what a bind mount
// shows), a copy is not. The rows attack the source side (a symlink at the end of the
// path or on the way, to outside the tree or inside it, a missing source) and the request
// (a source climbing out, a relative destination); the controls are the hard-linked file
// and the tree itself, which pass.
func TestCheck(t *testing.T) {
	root := t.TempDir()
	tree := filepath.Join(root, "tree")
	croot := filepath.Join(root, "croot")
	outside := filepath.Join(root, "run-user")
	for _, d := range []string{tree + "/workers/a", tree + "/docs", croot + "/lever/workers", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(tree+"/lever.yaml", "x")
	write(tree+"/workers/a/notes", "x")
	write(outside+"/notes", "x")
	if err := os.Link(tree+"/lever.yaml", croot+"/lever/lever.yaml"); err != nil {
		t.Fatal(err)
	}
	write(croot+"/lever/copy.yaml", "x") // same bytes, another file
	if err := os.Link(outside+"/notes", croot+"/lever/outside-notes"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, tree+"/workers/evil"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", tree+"/workers/inside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, tree+"/via"); err != nil {
		t.Fatal(err)
	}
	// The tree itself, seen in the container: croot/lever is not the tree, so the
	// control for "." uses the tree as the container's root too.
	cases := []struct {
		name       string
		root       string
		mounts     []Mount
		mountRoots bool   // require mount points (nothing here is one)
		want       string // "" = proven
	}{
		{"the file itself (hard link: one inode)", croot, []Mount{{Rel: "lever.yaml", Dest: "/lever/lever.yaml"}}, false, ""},
		{"the tree itself", root, []Mount{{Rel: ".", Dest: "/tree"}}, false, ""},
		{"another file with the same bytes", croot, []Mount{{Rel: "lever.yaml", Dest: "/lever/copy.yaml"}}, false, "the container's /lever/copy.yaml is not the tree's " + tree + "/lever.yaml"},
		{"what a followed symlink mounted, the link taken away since", croot, []Mount{{Rel: "workers/a/notes", Dest: "/lever/outside-notes"}}, false, "is not the tree's"},
		{"source is a symlink out of the tree", croot, []Mount{{Rel: "workers/evil", Dest: "/lever/workers"}}, false, "workers/evil resolves to " + outside + " through a symlink"},
		{"source is a symlink inside the tree", croot, []Mount{{Rel: "workers/inside", Dest: "/lever/workers"}}, false, "workers/inside resolves to " + tree + "/workers/a through a symlink"},
		{"a symlink on the way", croot, []Mount{{Rel: "via/notes", Dest: "/lever/outside-notes"}}, false, "via/notes resolves to " + outside + "/notes through a symlink"},
		{"missing source", croot, []Mount{{Rel: "workers/gone", Dest: "/lever/workers"}}, false, "workers/gone is missing"},
		{"source climbing out", croot, []Mount{{Rel: "../run-user", Dest: "/lever/workers"}}, false, `"../run-user" is not a clean path below the tree`},
		{"unclean source", croot, []Mount{{Rel: "workers/./a", Dest: "/lever/workers"}}, false, "is not a clean path below the tree"},
		{"relative destination", croot, []Mount{{Rel: "lever.yaml", Dest: "lever/lever.yaml"}}, false, "is not a clean absolute path in the container"},
		{"missing destination", croot, []Mount{{Rel: "lever.yaml", Dest: "/lever/nope"}}, false, "the container's /lever/nope"},
		// The right file, but seen through its parent, not mounted at the destination:
		// what a nested mount's redirected destination leaves behind.
		{"the right file, not a mount point", croot, []Mount{{Rel: "lever.yaml", Dest: "/lever/lever.yaml"}}, true, "the container's /lever/lever.yaml is not a mount point"},
		{"planned read-only, writable", croot, []Mount{{Rel: "lever.yaml", Dest: "/lever/lever.yaml", ReadOnly: true}}, false, "the container's /lever/lever.yaml is writable, and was planned read-only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := check(Request{Pid: 1, Tree: tree, Mounts: c.mounts}, c.root, c.mountRoots)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error holding %q", err, c.want)
			}
		})
	}
}

// TestCheckRefusesTheGuestsOwnNamespace: a pid whose process shares the helper's mount
// namespace (a guest process, not a container's) would compare the tree with itself and
// prove anything; it is refused before any comparison. The control is the same request
// through check, against the same root, which passes.
func TestCheckRefusesTheGuestsOwnNamespace(t *testing.T) {
	tree := t.TempDir()
	req := Request{Pid: os.Getpid(), Tree: tree, Mounts: []Mount{{Rel: ".", Dest: tree}}}
	if err := check(req, "/", false); err != nil {
		t.Fatalf("control: the tree compared with itself: %v", err)
	}
	if err := Check(req); err == nil || !strings.Contains(err.Error(), "shares the guest's mount namespace") {
		t.Fatalf("got %v, want a refusal of the guest's own namespace", err)
	}
	if err := Check(Request{Tree: tree}); err == nil || !strings.Contains(err.Error(), "no container process") {
		t.Fatalf("pid 0: got %v", err)
	}
}

// TestServeIsStrict: a request with a field the helper does not know is refused, naming it.
func TestServeIsStrict(t *testing.T) {
	err := Serve(strings.NewReader(`{"pid":1,"tree":"/lever","mounts":[],"skip":true}`), nil)
	if err == nil || !strings.Contains(err.Error(), `unknown field "skip"`) {
		t.Fatalf("got %v", err)
	}
}
