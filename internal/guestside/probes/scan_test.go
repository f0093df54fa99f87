package probes

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSearchFindsEverySpelling plants the key, spelled each way lever looks for, in files
// under a root, and near-misses beside them: each planted file is found with its
// spelling, nothing else is, and the pruned dir is not entered. The key never reaches the
// search: it gets Patterns (anchors and digests) only.
func TestSearchFindsEverySpelling(t *testing.T) {
	key := []byte("sk-test-9~~~f8e7d6c5b4a39281706f5e4d3c2b1a0") // "~~~" encodes with a + in base64
	dir := t.TempDir()
	write := func(rel string, data []byte) string {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	b64 := func(e *base64.Encoding, prefix string) []byte {
		return []byte("Authorization: Basic " + e.EncodeToString(append([]byte(prefix), key...)) + "\n")
	}
	want := map[string]string{
		write("a/b/leak.bin", append(append([]byte("prefix\x00"), key...), "suffix"...)): "raw",
		write("exact", key): "raw",
		// across a chunk boundary, and at the very end of the second chunk
		write("a/straddle", append(make([]byte, chunk-7), key...)):                   "raw",
		write("a/tail", append(bytes.Repeat([]byte{'x'}, 2*chunk-len(key)), key...)): "raw",
		write("b64/0", b64(base64.StdEncoding, "")):                                  "base64 from byte 0",
		write("b64/1", b64(base64.StdEncoding, "u")):                                 "base64 from byte 2",
		write("b64/2", b64(base64.StdEncoding, "us")):                                "base64 from byte 1",
		write("b64/url", b64(base64.URLEncoding, "")):                                "base64url from byte 0",
	}
	write("pruned/leak", key)
	write("a/clean.txt", bytes.Repeat([]byte("sk-test-"), 100000))
	write("a/almost", key[:len(key)-1])
	write("a/flipped", append(append([]byte(nil), key[:len(key)-1]...), 'X'))
	// the same file reached through a second root (a bind mount in a container's view)
	// is read once and reported under both paths
	link := filepath.Join(t.TempDir(), "view")
	if err := os.Symlink(filepath.Join(dir, "a", "b"), link); err != nil {
		t.Fatal(err)
	}
	want[filepath.Join(link, "leak.bin")] = "raw"
	req := Scan{Patterns: Patterns(key), Roots: []string{dir, link + "/"}, Prune: []string{filepath.Join(dir, "pruned")}}
	for _, p := range req.Patterns {
		if bytes.Contains(p.Anchor, key[4:]) || len(p.Anchor) > 4 {
			t.Fatalf("pattern %s carries %q of the key", p.Spelling, p.Anchor)
		}
	}
	st := Search(req)
	got := map[string]string{}
	for _, h := range st.Found {
		got[h.Where] = h.Spelling
	}
	for p, sp := range want {
		if got[p] != sp {
			t.Errorf("%s: found as %q, want %q", p, got[p], sp)
		}
	}
	if len(got) != len(want) {
		t.Errorf("found %v, want only %v", got, want)
	}
	if st.Files != len(want)-1+3 || st.Bytes < 3*chunk { // the alias is not read again
		t.Errorf("scanned %d files, %d bytes", st.Files, st.Bytes)
	}
}

// TestSearchProcesses: the environment and command line of a container's process and its
// descendants are searched (ProcsOf), a process outside that tree only with AllProcs.
func TestSearchProcesses(t *testing.T) {
	key := []byte("sk-proc-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-0123456789abcdef")
	start := func(env bool, args ...string) *exec.Cmd {
		c := exec.Command("sleep", append([]string{"30"}, args...)...)
		if env {
			c.Env = append(os.Environ(), "LEAKED="+string(key))
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		return c
	}
	// a "container": sh whose child holds the key in its environment
	sh := exec.Command("sh", "-c", "LEAKED="+string(key)+" sleep 30 & wait")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	outsider := start(true) // exec'd with the key in its environment when Start returns
	// The container's child holds the key once sh has forked and exec'd it: wait for that
	// (a fixed pause could end first on a loaded machine).
	for deadline := time.Now().Add(20 * time.Second); !childEnvHolds(sh.Process.Pid, key); {
		if time.Now().After(deadline) {
			t.Fatal("control: the container's child never ran with the key in its environment")
		}
		time.Sleep(10 * time.Millisecond)
	}
	pats := Patterns(key)
	for _, tc := range []struct {
		name string
		s    Scan
		want []string // substrings of Found's Where
		not  []string
	}{
		{"the container's tree", Scan{Patterns: pats, ProcsOf: []int{sh.Process.Pid}}, []string{"environment of pid"}, []string{"pid " + strconv.Itoa(outsider.Process.Pid)}},
		{"every process", Scan{Patterns: pats, AllProcs: true}, []string{"environment of pid " + strconv.Itoa(outsider.Process.Pid)}, nil},
		{"an unrelated tree", Scan{Patterns: pats, ProcsOf: []int{os.Getpid() + 1<<20}}, nil, []string{"pid"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Search(tc.s)
			var where []string
			for _, h := range st.Found {
				where = append(where, h.Where)
			}
			all := strings.Join(where, "; ")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("found %q, want %q", all, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(all, n) {
					t.Errorf("found %q, must not %q", all, n)
				}
			}
		})
	}
}

// childEnvHolds reports whether a child of pid has s in its environment.
func childEnvHolds(pid int, s []byte) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, c := range strings.Fields(string(b)) {
		if env, err := os.ReadFile("/proc/" + c + "/environ"); err == nil && bytes.Contains(env, s) {
			return true
		}
	}
	return false
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/t\134x`: `/t\x`, `/end\04`: `/end\04`} {
		if got := unescapeMount(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// TestFindContainers: the first process under a conmon of the run user whose container
// name has the instance's prefix is found; one under another instance's name, or under a
// process that only carries the name, is not.
func TestFindContainers(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conmon := filepath.Join(dir, "conmon")
	sh, _ := os.ReadFile("/bin/sh")
	if err := os.WriteFile(conmon, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	child := func(bin, name string) int {
		t.Helper()
		c := exec.Command(bin, "-c", "sleep 30 & echo $!; wait", "-n", name)
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
		var pid int
		if _, err := fmt.Fscan(out, &pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}
	mine := child(conmon, "lever-inst-manager")
	other := child(conmon, "lever-other-manager")
	impostor := child("/bin/sh", "lever-inst-worker-a") // not conmon
	// an exec session: a conmon of the instance's name whose child is a second conmon
	// (its own child, the exec'd process, hangs under that one)
	sess := exec.Command(conmon, "-c", `"$0" -c 'sleep 30; :' & echo $!; wait`, conmon, "-n", "lever-inst-manager-bench")
	sessOut, err := sess.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sess.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Process.Kill(); sess.Wait() })
	var inner int
	if _, err := fmt.Fscan(sessOut, &inner); err != nil {
		t.Fatal(err)
	}
	uid, pids, err := findContainers(me.Username, "lever-inst-")
	if err != nil || strconv.Itoa(uid) != me.Uid {
		t.Fatalf("uid %d (%v), want %s", uid, err, me.Uid)
	}
	has := map[int]bool{}
	for _, p := range pids {
		has[p] = true
	}
	if !has[mine] || has[other] || has[impostor] || has[inner] {
		t.Fatalf("found %v: want %d, not %d, %d or the exec session's second conmon %d", pids, mine, other, impostor, inner)
	}
	if _, _, err := findContainers("no-such-user-lvtb", "lever-inst-"); err == nil {
		t.Fatal("an unknown run user was accepted")
	}
}

// TestSearchRootOnlyTrees: in a RootOnly tree a root-owned, root-only file is counted and
// not read; the same key in a file a non-root user could have written there (owned by
// one, world-writable, or below a directory owned by one or world-writable) is found.
// Positive control: the whole tree searched without RootOnly finds the root-only file too.
func TestSearchRootOnlyTrees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make root-owned files beside files owned by another user")
	}
	key := []byte("sk-test-rootonly-0123456789abcdef0123456789")
	dir := t.TempDir()
	tree := filepath.Join(dir, "usr", "lib")
	write := func(rel string, mode os.FileMode, uid int) string {
		p := filepath.Join(tree, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, append([]byte("x="), key...), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode) // past the umask
		if err := os.Chown(p, uid, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rootFile := write("pkg/root-only.so", 0o644, 0)
	want := []string{
		write("pkg/owned-by-user", 0o644, 1000),
		write("pkg/world-writable", 0o666, 0),
		write("open/under-open-dir", 0o644, 0),
		write("userdir/deeper/under-user-dir", 0o644, 0),
	}
	os.Chmod(filepath.Join(tree, "open"), 0o777)
	os.Chown(filepath.Join(tree, "userdir"), 1000, 1000)
	outside := filepath.Join(dir, "etc", "leak")
	os.MkdirAll(filepath.Dir(outside), 0o755)
	os.WriteFile(outside, key, 0o600) // root-only, but not in a RootOnly tree: read
	want = append(want, outside)

	found := func(st Stats) []string {
		var out []string
		for _, h := range st.Found {
			out = append(out, h.Where)
		}
		return out
	}
	st := Search(Scan{Patterns: Patterns(key), Roots: []string{dir}, RootOnly: []string{tree}})
	got := strings.Join(found(st), "\n")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s not found; found:\n%s", w, got)
		}
	}
	if strings.Contains(got, rootFile) || st.RootOnlyFiles != 1 || st.RootOnlyBytes != int64(len(key)+2) {
		t.Errorf("root-only file: found %v, counted %d files %d bytes; want not read, 1 file", strings.Contains(got, rootFile), st.RootOnlyFiles, st.RootOnlyBytes)
	}
	all := Search(Scan{Patterns: Patterns(key), Roots: []string{dir}})
	if !strings.Contains(strings.Join(found(all), "\n"), rootFile) || all.RootOnlyFiles != 0 {
		t.Errorf("positive control: without RootOnly the root-only file must be found: %v", found(all))
	}
}
