//go:build linux

package pipeline

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lever-jail/lever/internal/lev/levstate"
	"golang.org/x/sys/unix"
)

// swapGate passes every call and, before allowing it, runs swap: the gate step sits
// between the fence step (which checks the path) and the tool's run (which opens it), so a
// swap here is exactly the race a concurrent shell command wins, made deterministic.
type swapGate struct{ swap func() }

func (g swapGate) Check(context.Context, *Call) (Decision, error) {
	if g.swap != nil {
		g.swap()
	}
	return Decision{Allow: true, Source: "test-swap"}, nil
}
func (swapGate) Observe(context.Context, *Call, *Result) {}

// levHomeEnv is a fence env whose workdir holds lev's home (.lev, as a jail's tree does),
// protected as the runner protects it: a levstate.State on the FS and its paths on the
// pipeline.
func levHomeEnv(t *testing.T) (*fenceEnv, string) {
	e := newFenceEnv(t)
	home := filepath.Join(e.wd, ".lev")
	mustWrite(t, filepath.Join(home, "policy.toml"), "ORIG")
	mustWrite(t, filepath.Join(home, "config.toml"), "[security]\n")
	mustWrite(t, filepath.Join(e.wd, "sub", "policy.toml"), "ORIG")
	st, err := levstate.New(home, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.p.FS.Protect = st
	e.p.Protected = st.Paths()
	return e, home
}

// snapshot is every path under dir with its content (directories as "dir").
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[p] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, before, after map[string]string) {
	t.Helper()
	var diff []string
	for p, v := range after {
		if w, ok := before[p]; !ok || w != v {
			diff = append(diff, p+" = "+v)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			diff = append(diff, p+" removed")
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Fatalf("lev's home changed: %v", diff)
	}
}

// TestSwapIntoLevHomeRefused attacks every file tool with the swap issue 27 found: the
// path is checked while sub is a plain directory, then sub becomes a symlink to lev's
// home inside the workdir (which openat2's RESOLVE_BENEATH alone lets through). Every call
// must be refused by the check on the descriptor it acts on, and lev's home must be byte
// for byte what it was. Each case also runs without the swap, as its positive control:
// the same call then succeeds and acts on sub.
func TestSwapIntoLevHomeRefused(t *testing.T) {
	cases := []struct {
		name, tool string
		args       map[string]any
		link       string // what sub becomes: a symlink with this target ("" = the absolute home)
		landed     func(t *testing.T, wd string, res *Result) bool
		want       string // in the refusal; "" = "lev's own state"
	}{
		{"write over an existing file", "write_file", map[string]any{"path": "sub/policy.toml", "content": "PWNED"}, "",
			func(t *testing.T, wd string, _ *Result) bool { return read(t, wd, "sub/policy.toml") == "PWNED" }, ""},
		{"write a new file", "write_file", map[string]any{"path": "sub/new.toml", "content": "PWNED"}, ".lev",
			func(t *testing.T, wd string, _ *Result) bool { return read(t, wd, "sub/new.toml") == "PWNED" }, ""},
		{"write making directories", "write_file", map[string]any{"path": "sub/a/b/c.toml", "content": "PWNED"}, ".lev",
			func(t *testing.T, wd string, _ *Result) bool { return read(t, wd, "sub/a/b/c.toml") == "PWNED" }, ""},
		// An absolute link: openat2 beneath the workdir refuses to follow it at all.
		{"write making directories, absolute link", "write_file", map[string]any{"path": "sub/a/b/c.toml", "content": "PWNED"}, "",
			func(t *testing.T, wd string, _ *Result) bool { return read(t, wd, "sub/a/b/c.toml") == "PWNED" }, "writes never leave the workdir"},
		{"write a new file, absolute link", "write_file", map[string]any{"path": "sub/new.toml", "content": "PWNED"}, "",
			func(t *testing.T, wd string, _ *Result) bool { return read(t, wd, "sub/new.toml") == "PWNED" }, "writes never leave the workdir"},
		{"edit", "edit_file", map[string]any{"path": "sub/policy.toml", "old_string": "ORIG", "new_string": "PWNED"}, ".lev",
			func(t *testing.T, wd string, _ *Result) bool { return read(t, wd, "sub/policy.toml") == "PWNED" }, ""},
		{"read", "read_file", map[string]any{"path": "sub/policy.toml"}, "",
			func(t *testing.T, _ string, res *Result) bool { return res.Content == "ORIG" }, ""},
		{"list", "list_dir", map[string]any{"path": "sub"}, "",
			func(t *testing.T, _ string, res *Result) bool { return strings.Contains(res.Content, "policy.toml") }, ""},
	}
	for _, tc := range cases {
		for _, attack := range []bool{true, false} {
			name := tc.name + "/control"
			if attack {
				name = tc.name + "/swapped"
			}
			t.Run(name, func(t *testing.T) {
				e, home := levHomeEnv(t)
				sub := filepath.Join(e.wd, "sub")
				before := snapshot(t, home)
				if attack {
					e.p.Gate = swapGate{func() {
						must(t, os.Rename(sub, sub+".moved"))
						target := tc.link
						if target == "" {
							target = home
						}
						must(t, os.Symlink(target, sub))
						// The swap reaches lev's home: a write by name now lands there.
						if r, _ := filepath.EvalSymlinks(sub); r != home {
							t.Fatalf("the swap does not point at lev's home: %s", r)
						}
					}}
				} else {
					e.p.Gate = swapGate{}
				}
				_, res := e.call(tc.tool, tc.args)
				want := tc.want
				if want == "" {
					want = "lev's own state"
				}
				if attack {
					if res.Refusal == nil || res.Refusal.Step != StepFence || !strings.Contains(res.Content, want) {
						t.Fatalf("not refused as lev's state: %+v", res)
					}
					if strings.Contains(res.Content, "ORIG") {
						t.Fatalf("the refusal carries the file: %s", res.Content)
					}
				} else if res.IsError || !tc.landed(t, e.wd, res) {
					t.Fatalf("control: the call did not act on sub: %+v", res)
				}
				sameTree(t, before, snapshot(t, home))
				t.Logf("%s", res.Content)
			})
		}
	}
}

func read(t *testing.T, wd, p string) string {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(wd, p))
	return string(b)
}

// TestHardLinkSwapRefused: the file itself is swapped, after the fence step, for a hard
// link to lev's config (made by a shell, say): the descriptor's inode is lev's, refused.
func TestHardLinkSwapRefused(t *testing.T) {
	for _, attack := range []bool{true, false} {
		e, home := levHomeEnv(t)
		target := filepath.Join(e.wd, "cfg.toml")
		mustWrite(t, target, "mine")
		before := snapshot(t, home)
		e.p.Gate = swapGate{}
		if attack {
			e.p.Gate = swapGate{func() {
				must(t, os.Remove(target))
				must(t, os.Link(filepath.Join(home, "config.toml"), target))
			}}
		}
		_, res := e.call("write_file", map[string]any{"path": "cfg.toml", "content": "[security]\nread_paths=[\"/\"]\n"})
		if attack {
			if res.Refusal == nil || !strings.Contains(res.Content, "lev's own state") {
				t.Fatalf("hard link not refused: %+v", res)
			}
		} else if res.IsError || read(t, e.wd, "cfg.toml") != "[security]\nread_paths=[\"/\"]\n" {
			t.Fatalf("control: %+v", res)
		}
		sameTree(t, before, snapshot(t, home))
	}
}

// TestConcurrentSwapRace is the race itself, undirected: a goroutine exchanges sub (a
// directory) and a symlink to lev's home as fast as it can while write_file and edit_file
// run through the pipeline again and again. Nothing may ever appear in or change in lev's
// home. The controls: writes do land in sub (the tools work under the race), and the
// descriptor check is seen catching a call the fence step passed (the race was won).
func TestConcurrentSwapRace(t *testing.T) {
	e, home := levHomeEnv(t)
	sub, alt := filepath.Join(e.wd, "sub"), filepath.Join(e.wd, "alt")
	must(t, os.Symlink(".lev", alt)) // relative: openat2 beneath the workdir follows it
	before := snapshot(t, home)
	if err := unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE); err != nil {
		t.Skipf("RENAME_EXCHANGE: %v", err)
	}
	must(t, unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE))

	var passed atomic.Bool // the current call got past steps 1 to 4
	e.p.Decided = func(_ *Call, res *Result) { passed.Store(res == nil) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE)
			}
		}
	}()
	var landed, caught int
	for i := 0; i < 20000 && (landed < 5 || caught < 5); i++ {
		var res *Result
		switch i % 3 {
		case 0:
			_, res = e.call("write_file", map[string]any{"path": "sub/d/policy.toml", "content": "PWNED"})
		case 1:
			_, res = e.call("write_file", map[string]any{"path": "sub/policy.toml", "content": "PWNED"})
		default:
			_, res = e.call("edit_file", map[string]any{"path": "sub/policy.toml", "old_string": "PWNED", "new_string": "EDITED"})
		}
		switch {
		case !res.IsError:
			landed++
		case passed.Load() && strings.Contains(res.Content, "lev's own state"):
			caught++ // the fence step passed it; the descriptor check refused it
		}
	}
	close(stop)
	wg.Wait()
	// Put sub back as the directory, whichever name holds it now.
	if fi, err := os.Lstat(sub); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		must(t, unix.Renameat2(unix.AT_FDCWD, sub, unix.AT_FDCWD, alt, unix.RENAME_EXCHANGE))
	}
	sameTree(t, before, snapshot(t, home))
	t.Logf("landed %d, caught after the fence step %d", landed, caught)
	if landed == 0 {
		t.Fatal("control: no write landed in sub under the race")
	}
	if got := read(t, e.wd, "sub/d/policy.toml"); got != "PWNED" {
		t.Fatalf("control: sub/d/policy.toml holds %q", got)
	}
	if caught == 0 {
		t.Fatal("control: the race was never won past the fence step, so nothing was tested")
	}
}

// TestBindMountOfLevHomeRefused: lev's home reached under a name no path check knows (a
// bind mount made after lev built its protected set, as a mount namespace's view or a
// later mount would give). Only the device and inode of the directories above the
// descriptor show it is lev's home; writes and listings there are refused. The control is
// a bind mount of an ordinary directory, where the same write lands.
func TestBindMountOfLevHomeRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	e, home := levHomeEnv(t)
	mustWrite(t, filepath.Join(home, "runs", "r1", "run.json"), "RECORD")
	st, err := levstate.New(home, nil) // again: the record's directory exists now
	must(t, err)
	e.p.FS.Protect, e.p.Protected = st, st.Paths()
	plain := filepath.Join(e.wd, "plain")
	must(t, os.MkdirAll(plain, 0o755))
	mount := func(src, dst string) {
		must(t, os.MkdirAll(dst, 0o755))
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			t.Skipf("bind mount: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	}
	mount(home, filepath.Join(e.wd, "bm"))
	mount(plain, filepath.Join(e.wd, "bmplain"))
	if _, err := os.Stat(filepath.Join(e.wd, "bm", "policy.toml")); err != nil {
		t.Fatalf("the bind mount does not show lev's home: %v", err)
	}
	before := snapshot(t, home)
	cases := []struct {
		tool    string
		args    map[string]any
		refused bool
	}{
		{"write_file", map[string]any{"path": "bm/new.toml", "content": "PWNED"}, true},
		{"write_file", map[string]any{"path": "bm/d/new.toml", "content": "PWNED"}, true},
		{"list_dir", map[string]any{"path": "bm"}, true},
		{"read_file", map[string]any{"path": "bm/runs/r1/run.json"}, true},
		{"write_file", map[string]any{"path": "bmplain/new.toml", "content": "fine"}, false},
		{"list_dir", map[string]any{"path": "bmplain"}, false},
		{"read_file", map[string]any{"path": "bmplain/new.toml"}, false},
	}
	for _, tc := range cases {
		_, res := e.call(tc.tool, tc.args)
		got := res.Refusal != nil && strings.Contains(res.Content, "lev's own state")
		if got != tc.refused {
			t.Errorf("%s %v: refused=%v, want %v: %s", tc.tool, tc.args, got, tc.refused, res.Content)
		}
		t.Logf("%s", res.Content)
	}
	sameTree(t, before, snapshot(t, home))
	if read(t, e.wd, "plain/new.toml") != "fine" {
		t.Fatal("control: the write through the ordinary bind mount did not land")
	}
}
