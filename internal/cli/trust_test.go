package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/lever-jail/lever/internal/config"
	"github.com/lever-jail/lever/internal/exitcode"
	"github.com/lever-jail/lever/internal/hosttrust"
)

const trustKey = "sk-ant-test-0123456789abcdef\n"

// keyJail writes a lever.yaml whose broker uses api_key_file key (as written in the
// file), and a key outside the tree at home/api-key; it returns the config's path, the
// tree and home. Its backend is Lima with a limactl that only logs its call and fails, so
// a bring-up that gets past the question fails at its first step and changes nothing on
// this host (as root, lever refuses to run limactl at all).
func keyJail(t *testing.T, key string, extra string) (cfg, tree, home string) {
	t.Helper()
	t.Setenv("LEVER_STATE_DIR", t.TempDir())
	root := t.TempDir()
	tree, home = filepath.Join(root, "proj"), filepath.Join(root, "home")
	for _, d := range []string{filepath.Join(tree, "docs"), home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, "api-key"), []byte(trustKey), 0o600); err != nil {
		t.Fatal(err)
	}
	limactl := filepath.Join(root, "limactl")
	if err := os.WriteFile(limactl, []byte("#!/bin/sh\necho \"$@\" >>\"$0.log\"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg = filepath.Join(tree, "lever.yaml")
	y := fmt.Sprintf("name: unit\nbackend: lima\nworkers:\n  - name: docs\n    dir: docs\nbroker:\n  llm_auth: api-key\n  api_key_file: %s\n  llm_upstream: https://api.anthropic.com\nlima:\n  limactl: %s\n%s", key, limactl, extra)
	if err := os.WriteFile(cfg, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, tree, home
}

// leverIn is Main with stdin given.
func leverIn(stdin io.Reader, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	root := NewRoot(&out, &errb)
	root.SetIn(stdin)
	root.SetArgs(args)
	err := root.Execute()
	if msg := exitcode.Message(err); msg != "" {
		fmt.Fprintf(&errb, "lever: %s\n", msg)
	}
	return exitcode.Of(err), out.String(), errb.String()
}

// TestUpRefusesKeyFileInOrThroughTheTree: a lever.yaml naming, as api_key_file, a file
// the agents can read by some spelling, or a file that is not the user's own, is refused
// by lever up and lever up --dry-run, exit 2, naming the key, before anything is asked or
// kept. The control is the same lever.yaml naming the key outside the tree: the dry run
// shows it among the grants.
func TestUpRefusesKeyFileInOrThroughTheTree(t *testing.T) {
	t.Setenv("LEVER_LEV_BINARY", staticLev(t))
	cases := []struct {
		name  string
		plant func(t *testing.T, tree, home string) string // returns api_key_file
		want  string
	}{
		{"control: the user's key outside the tree", func(t *testing.T, tree, home string) string {
			return filepath.Join(home, "api-key")
		}, ""},
		{"a key file in the tree", func(t *testing.T, tree, home string) string {
			os.WriteFile(filepath.Join(tree, "key"), []byte(trustKey), 0o600)
			return "key"
		}, "is inside the tree"},
		{"a symlink out of the tree back into it", func(t *testing.T, tree, home string) string {
			os.WriteFile(filepath.Join(tree, "docs", "key"), []byte(trustKey), 0o600)
			os.Symlink(filepath.Join(tree, "docs", "key"), filepath.Join(home, "link"))
			return filepath.Join(home, "link")
		}, "is inside the tree"},
		{"a dot-dot spelling into the tree", func(t *testing.T, tree, home string) string {
			os.WriteFile(filepath.Join(tree, "docs", "key"), []byte(trustKey), 0o600)
			return filepath.Join(home, "..", filepath.Base(tree), "docs", "key")
		}, "is inside the tree"},
		{"a hard link of a file in the tree", func(t *testing.T, tree, home string) string {
			os.WriteFile(filepath.Join(tree, "docs", "key"), []byte(trustKey), 0o600)
			os.Link(filepath.Join(tree, "docs", "key"), filepath.Join(home, "hard"))
			return filepath.Join(home, "hard")
		}, "has 2 hard links"},
		{"a bind mount of the tree", func(t *testing.T, tree, home string) string {
			if os.Geteuid() != 0 {
				t.Skip("bind mounts need root")
			}
			os.WriteFile(filepath.Join(tree, "docs", "key"), []byte(trustKey), 0o600)
			mnt := filepath.Join(home, "mnt")
			os.Mkdir(mnt, 0o755)
			if out, err := exec.Command("mount", "--bind", tree, mnt).CombinedOutput(); err != nil {
				t.Skipf("mount --bind: %v %s", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", mnt).Run() })
			return filepath.Join(mnt, "docs", "key")
		}, "lies in the tree"},
		{"a key file of another user", func(t *testing.T, tree, home string) string {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			p := filepath.Join(home, "theirs")
			os.WriteFile(p, []byte(trustKey), 0o600)
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return p
		}, "owned by uid 65534, not by you"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, tree, home := keyJail(t, "PLACEHOLDER", "")
			key := c.plant(t, tree, home)
			data, _ := os.ReadFile(cfg)
			os.WriteFile(cfg, bytes.Replace(data, []byte("PLACEHOLDER"), []byte(key), 1), 0o644)
			for _, args := range [][]string{{"up", "--dry-run", "-c", cfg}, {"up", "--yes", "-c", cfg}, {"apply", "--yes", "-c", cfg}} {
				code, out, errs := leverIn(strings.NewReader(""), args...)
				if c.want == "" {
					if args[1] != "--dry-run" {
						continue // the control is not brought up here
					}
					if code != 0 || !strings.Contains(out, "api key file:") || !strings.Contains(out, key) {
						t.Fatalf("control %v: exit %d, want the grants naming %s:\n%s%s", args, code, key, out, errs)
					}
					continue
				}
				if code != 2 || !strings.Contains(errs, c.want) || !strings.Contains(errs, "api_key_file") {
					t.Fatalf("%v: exit %d, stderr %q; want 2 and %q", args, code, errs, c.want)
				}
				if strings.Contains(out+errs, strings.TrimSpace(trustKey)) {
					t.Fatalf("%v: the key's contents were printed", args)
				}
				if strings.Contains(errs, "grants the jail") {
					t.Fatalf("%v: asked about grants before refusing the key file", args)
				}
			}
			if c.want != "" {
				if kept, _ := hosttrust.Kept(config.StateRoot(), cfg); kept != nil {
					t.Fatal("a refused config's grants were kept")
				}
			}
		})
	}
}

// ptyUp runs lever up CONFIG on a real terminal (a pty as stdin), answers the prompt with
// answer once it shows, and returns the exit code and stderr.
func ptyUp(t *testing.T, answer string, args ...string) (int, string) {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer slave.Close()
	go io.Copy(io.Discard, master) // the terminal's echo
	var errb syncBuf
	var out bytes.Buffer
	root := NewRoot(&out, &errb)
	root.SetIn(slave)
	root.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- root.Execute() }()
	answered := false
	deadline := time.After(60 * time.Second)
	for {
		select {
		case err := <-done:
			if msg := exitcode.Message(err); msg != "" {
				fmt.Fprintf(&errb, "lever: %s\n", msg)
			}
			return exitcode.Of(err), errb.String()
		case <-deadline:
			t.Fatalf("lever %v did not finish; stderr so far:\n%s", args, errb.String())
		case <-time.After(20 * time.Millisecond):
			if !answered && strings.Contains(errb.String(), "[y/N] ") {
				answered = true
				if _, err := master.Write([]byte(answer + "\n")); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// syncBuf is a bytes.Buffer read while the command writes it.
type syncBuf struct {
	mu  chanMutex
	buf bytes.Buffer
}

type chanMutex chan struct{}

func (b *syncBuf) lock() {
	if b.mu == nil {
		b.mu = make(chanMutex, 1)
	}
	b.mu <- struct{}{}
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.lock()
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string {
	b.lock()
	defer func() { <-b.mu }()
	return b.buf.String()
}

// TestFirstUpAsks: the first lever up of a lever.yaml shows what it grants and asks on
// the terminal. Enter or n refuses (exit 2) and changes nothing, y proceeds to the
// bring-up and keeps the answer, so the next up does not ask; a changed grant asks again
// showing the change; off a terminal lever up refuses naming --yes, and --yes proceeds.
// The bring-up that proceeds fails at its first step, the guest (keyJail's limactl), which
// proves it got past the question and brings nothing up here.
func TestFirstUpAsks(t *testing.T) {
	t.Setenv("LEVER_LEV_BINARY", staticLev(t))
	cfg, _, home := keyJail(t, "", "")
	data, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, bytes.Replace(data, []byte("api_key_file: \n"), []byte("api_key_file: "+filepath.Join(home, "api-key")+"\n"), 1), 0o644)
	kept := func() []byte {
		b, err := hosttrust.Kept(config.StateRoot(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	asked := "bring the jail up with these grants? [y/N] "
	refusedHere := "not confirmed; nothing was brought up"
	offTerm := "stdin is not a terminal to ask on; nothing was brought up"

	for _, answer := range []string{"", "n", "no", "yes please"} {
		code, errs := ptyUp(t, answer, "up", "-c", cfg)
		if code != 2 || !strings.Contains(errs, asked) || !strings.Contains(errs, refusedHere) {
			t.Fatalf("answer %q: exit %d, want 2 after asking:\n%s", answer, code, errs)
		}
		for _, g := range []string{"first bring-up of " + cfg, "api key file:", filepath.Join(home, "api-key"), "https://api.anthropic.com", "POST /v1/messages", "egress:", "open", "allowed ports:"} {
			if !strings.Contains(errs, g) {
				t.Errorf("the question does not show %q:\n%s", g, errs)
			}
		}
		if kept() != nil {
			t.Fatalf("answer %q kept the grants", answer)
		}
	}
	// Off a terminal, without --yes: refused, naming --yes; nothing kept.
	code, _, errs := leverIn(strings.NewReader("y\n"), "up", "-c", cfg)
	if code != 2 || !strings.Contains(errs, offTerm) || !strings.Contains(errs, "lever up --yes") || strings.Contains(errs, asked) {
		t.Fatalf("off a terminal: exit %d, want the refusal naming --yes:\n%s", code, errs)
	}
	if kept() != nil {
		t.Fatal("the off-terminal refusal kept the grants")
	}
	// y proceeds into the bring-up and keeps the grants.
	code, errs = ptyUp(t, "y", "up", "-c", cfg)
	if !strings.Contains(errs, asked) || strings.Contains(errs, refusedHere) || code == 0 {
		t.Fatalf("y: exit %d, want the bring-up to proceed (and fail without ip):\n%s", code, errs)
	}
	if !strings.Contains(errs, "lever: jail: ") {
		t.Fatalf("y: the bring-up did not reach the guest step:\n%s", errs)
	}
	if kept() == nil {
		t.Fatal("y did not keep the grants")
	}
	// The same grants: not asked again, even off a terminal.
	code, _, errs = leverIn(strings.NewReader(""), "up", "-c", cfg)
	if strings.Contains(errs, "grants") || strings.Contains(errs, offTerm) {
		t.Fatalf("unchanged grants asked again: exit %d\n%s", code, errs)
	}
	// A changed grant asks again, showing the change.
	os.WriteFile(cfg, append(bytes.Replace(data, []byte("api_key_file: \n"), []byte("api_key_file: "+filepath.Join(home, "api-key")+"\n"), 1), []byte("manager:\n  allow_ports: [5432]\n")...), 0o644)
	if kept() == nil {
		t.Fatal("lost the kept grants")
	}
	code, _, errs = leverIn(strings.NewReader(""), "up", "-c", cfg)
	if code != 2 || !strings.Contains(errs, "changed since you confirmed them") || !strings.Contains(errs, "-  allowed ports:       none") || !strings.Contains(errs, "+  allowed ports:       5432") {
		t.Fatalf("changed grants: exit %d, want the change shown and the off-terminal refusal:\n%s", code, errs)
	}
	code, errs = ptyUp(t, "n", "up", "-c", cfg)
	if code != 2 || !strings.Contains(errs, "+  allowed ports:       5432") || !strings.Contains(errs, refusedHere) {
		t.Fatalf("changed grants, n: exit %d\n%s", code, errs)
	}
	if strings.Contains(string(kept()), "5432") {
		t.Fatal("refusing the change kept it")
	}
	// --yes confirms without asking, off a terminal.
	code, _, errs = leverIn(strings.NewReader(""), "up", "--yes", "-c", cfg)
	if strings.Contains(errs, asked) || !strings.Contains(errs, "confirmed by --yes") || strings.Contains(errs, offTerm) {
		t.Fatalf("--yes: exit %d\n%s", code, errs)
	}
	if !strings.Contains(string(kept()), "5432") {
		t.Fatal("--yes did not keep the new grants")
	}
}
