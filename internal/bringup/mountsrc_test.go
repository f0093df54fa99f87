package bringup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lever-jail/lever/internal/containers"
	"github.com/lever-jail/lever/internal/guest"
)

// localRunner runs guest commands on this machine: the check is a shell script, and the
// real sh and realpath are what it must be proven against.
type localRunner struct{}

func (localRunner) Run(ctx context.Context, c guest.Cmd) (guest.Result, error) {
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return guest.Result{Stdout: out.Bytes(), Stderr: errb.Bytes(), ExitCode: ee.ExitCode()}, nil
	}
	return guest.Result{Stdout: out.Bytes(), Stderr: errb.Bytes()}, err
}

// TestMountSourcesRefuseSwappedSymlinks attacks the bind sources an agent can rewrite: a
// worker's dir or a read_only path swapped for a symlink (to the run user's runtime dir,
// say) is refused before the container starts, naming the path.
func TestMountSourcesRefuseSwappedSymlinks(t *testing.T) {
	root := t.TempDir()
	tree := filepath.Join(root, "tree")
	outside := filepath.Join(root, "run-user")
	for _, d := range []string{"workers/a", "workers/b", "docs", outside} {
		p := d
		if !filepath.IsAbs(d) {
			p = filepath.Join(tree, d)
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(tree, "workers", "evil")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(tree, "workers", "a"), filepath.Join(tree, "docs-link")); err != nil {
		t.Fatal(err)
	}
	in := &Instance{Runner: &guest.Counting{Inner: localRunner{}}, TreeSrc: tree}
	mounts := func(srcs ...string) containers.Container {
		c := containers.Container{Name: "c"}
		for _, s := range srcs {
			c.Mounts = append(c.Mounts, containers.Mount{Source: s})
		}
		return c
	}
	cases := []struct {
		name string
		ct   containers.Container
		want string // "" = accepted
	}{
		{"plain worker dir", mounts(filepath.Join(tree, "workers/a"), "/run/user/1000/lever/agents/worker-a"), ""},
		{"the tree itself and a ticket dir", mounts(tree, "/run/user/1000/lever/agents/manager"), ""},
		{"worker dir swapped for a link out", mounts(filepath.Join(tree, "workers/evil")), "workers/evil resolves to " + outside},
		{"read_only path is a link inside the tree", mounts(tree, filepath.Join(tree, "docs-link")), "docs-link resolves to"},
		{"missing source", mounts(filepath.Join(tree, "workers/gone")), "workers/gone is missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := in.checkMountSources(context.Background(), c.ct)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want a refusal naming %q", err, c.want)
			}
		})
	}
}

// TestMountSourcesRefusalQuotesTheTarget: the refusal names where the agent's symlink
// resolves, a name the agent chose; one holding an escape sequence (OSC 52, erase line,
// CR, an 8-bit CSI) reaches lever's error quoted, with no byte a terminal obeys. The
// control is a plain target, named as it is.
func TestMountSourcesRefusalQuotesTheTarget(t *testing.T) {
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
			in := &Instance{Runner: &guest.Counting{Inner: localRunner{}}, TreeSrc: tree}
			err := in.checkMountSources(context.Background(), containers.Container{Name: "c", Mounts: []containers.Mount{{Source: filepath.Join(tree, "workers", "evil")}}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal naming %q", err, c.want)
			}
			if i := strings.IndexFunc(err.Error(), func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) }); i >= 0 {
				t.Errorf("a control in the error at %q", err.Error()[i:])
			}
		})
	}
}
