package guestside

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/guest/guesttest"
)

// shRunner runs guest commands on this machine (as the test's user: root), counting them
// and remembering what each was sent.
type shRunner struct{ calls []guest.Cmd }

func (r *shRunner) Run(ctx context.Context, c guest.Cmd) (guest.Result, error) {
	r.calls = append(r.calls, c)
	return guesttest.Local{}.Run(ctx, c)
}

// TestHelperCache runs the cache's real scripts with a real shell: the first call of a
// fresh guest installs lev (its exact bytes, checked against the digest) and runs it; a
// later Helper (the next bring-up) runs the cached copy in one call carrying only the
// request; an install replaces older copies; and a copy or directory someone other than
// root could have changed is never run.
func TestHelperCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the cache is root's")
	}
	lev := echoLev(t)
	bin, _ := os.ReadFile(lev)
	sum := sha256.Sum256(bin)
	base := t.TempDir()
	dir := filepath.Join(base, "lever", "bin")
	cached := filepath.Join(dir, "lev-"+hex.EncodeToString(sum[:16]))
	req := []byte(`{"probes":[]}` + "\n")
	want := Command + " " + ModeProbe + "\n" + string(req)
	ctx := context.Background()

	// a fresh guest: missing, installed, run (3 calls); the request reaches lev intact
	r := &shRunner{}
	res, err := (&Helper{Lev: lev, Dir: dir}).Run(ctx, r, ModeProbe, req)
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("first call: %v exit %d out %q err %q", err, res.ExitCode, res.Stdout, res.Stderr)
	}
	if len(r.calls) != 3 || !bytes.Equal(r.calls[1].Stdin, bin) || !bytes.Equal(r.calls[2].Stdin, req) {
		t.Fatalf("first call made %d guest calls (want 3: run, install with lev's bytes, run)", len(r.calls))
	}
	if got, _ := os.ReadFile(cached); !bytes.Equal(got, bin) {
		t.Fatal("the cached lev is not the binary lever was given")
	}
	for p, mode := range map[string]os.FileMode{filepath.Dir(dir): 0o711 | os.ModeDir, dir: 0o700 | os.ModeDir, cached: 0o755} {
		if fi, _ := os.Stat(p); fi == nil || fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
		}
	}

	// the next bring-up: one call, no binary sent
	r = &shRunner{}
	res, err = (&Helper{Lev: lev, Dir: dir}).Run(ctx, r, ModeEnrol, req)
	if err != nil || string(res.Stdout) != Command+" "+ModeEnrol+"\n"+string(req) || len(r.calls) != 1 || bytes.Contains(r.calls[0].Stdin, bin[:4096]) {
		t.Fatalf("cached call: %v, %d calls, out %q", err, len(r.calls), res.Stdout)
	}

	// a copy someone else owns is refused, not run and not replaced
	os.Chown(cached, 65534, 65534)
	r = &shRunner{}
	res, _ = (&Helper{Lev: lev, Dir: dir}).Run(ctx, r, ModeProbe, req)
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "is not root's alone") || len(r.calls) != 1 {
		t.Fatalf("a copy owned by uid 65534 ran or was replaced: exit %d %q, %d calls", res.ExitCode, res.Stderr, len(r.calls))
	}
	os.Chown(cached, 0, 0)

	// a cache dir others can write: the copy there is not run, and lever will not install into it
	os.Chmod(dir, 0o777)
	r = &shRunner{}
	_, err = (&Helper{Lev: lev, Dir: dir}).Run(ctx, r, ModeProbe, req)
	if err == nil || !strings.Contains(err.Error(), "not a root-owned directory only root can write") || len(r.calls) != 2 {
		t.Fatalf("a world-writable cache dir: %v after %d calls", err, len(r.calls))
	}
	os.Chmod(dir, 0o700)

	// a symlink in the copy's place is not followed; the install replaces the link itself
	target := filepath.Join(base, "target")
	os.WriteFile(target, []byte("#!/bin/sh\necho not lev\n"), 0o755)
	os.Remove(cached)
	os.Symlink(target, cached)
	r = &shRunner{}
	res, err = (&Helper{Lev: lev, Dir: dir}).Run(ctx, r, ModeProbe, req)
	if err != nil || string(res.Stdout) != want || len(r.calls) != 3 {
		t.Fatalf("symlinked copy: %v, out %q, %d calls", err, res.Stdout, len(r.calls))
	}
	if fi, _ := os.Lstat(cached); fi.Mode()&os.ModeSymlink != 0 {
		t.Fatal("the symlink is still there")
	}
	if got, _ := os.ReadFile(target); string(got) != "#!/bin/sh\necho not lev\n" {
		t.Fatal("the install wrote through the symlink")
	}

	// an older lev's copy is removed when this one is installed
	old := filepath.Join(dir, "lev-00000000000000000000000000000000")
	os.WriteFile(old, []byte("old"), 0o755)
	os.Remove(cached)
	if _, err := (&Helper{Lev: lev, Dir: dir}).Run(ctx, &shRunner{}, ModeProbe, req); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Error("the older copy is still there")
	}
}

// TestHelperInstallRefusesCutOffCopy: a transfer cut short never takes the helper's name
// (and leaves no temporary file behind).
func TestHelperInstallRefusesCutOffCopy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the cache is root's")
	}
	lev := echoLev(t)
	dir := filepath.Join(t.TempDir(), "lever", "bin")
	h := &Helper{Lev: lev, Dir: dir}
	h.mu.Lock()
	if err := h.load(); err != nil {
		t.Fatal(err)
	}
	h.mu.Unlock()
	// a write that fails part way (here the file size limit, its signal ignored, as a
	// full disk would) never becomes the helper, and says why
	short := func(argv []string) []string {
		return []string{"/bin/sh", "-c", `trap "" XFSZ; ulimit -f ` + strconv.Itoa(len(h.bin)/512-1) + `; exec "$@"`, "sh", argv[0], argv[1], argv[2]}
	}
	for _, tc := range []struct {
		name  string
		stdin []byte
		wrap  func([]string) []string
		ok    bool
		why   string
	}{
		{"cut off", h.bin[:len(h.bin)-100], nil, false, "does not match its digest"},
		{"one byte changed", append([]byte{h.bin[0] ^ 1}, h.bin[1:]...), nil, false, "does not match its digest"},
		{"the copy's write fails", h.bin, short, false, "File too large"},
		{"whole (control)", h.bin, nil, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv := h.installArgv()
			if tc.wrap != nil {
				argv = tc.wrap(argv)
			}
			res, err := (&shRunner{}).Run(context.Background(), guest.Cmd{Argv: argv, Stdin: tc.stdin})
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(h.path())
			if tc.ok != (res.ExitCode == 0) || tc.ok != (statErr == nil) {
				t.Fatalf("exit %d (%s), installed: %v", res.ExitCode, res.Stderr, statErr == nil)
			}
			if !tc.ok && !strings.Contains(string(res.Stderr), tc.why) {
				t.Fatalf("refusal %q does not say why", res.Stderr)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".lev.*")); len(left) > 0 {
				t.Fatalf("temporary copies left: %v", left)
			}
		})
	}
}

// TestHelperConcurrentCallsInstallOnce: helper calls made at once on a guest without lev
// (bring-up's enrol and image steps) install it once between them, whichever finds it
// missing first; the calls that found it missing while another installed do not send it
// again.
func TestHelperConcurrentCallsInstallOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the cache is root's")
	}
	lev := echoLev(t)
	for i := 0; i < 10; i++ {
		dir := filepath.Join(t.TempDir(), "lever", "bin")
		h := &Helper{Lev: lev, Dir: dir}
		r := &lockedRunner{}
		errs := make(chan error, 4)
		for k := 0; k < 4; k++ {
			go func() {
				res, err := h.Run(context.Background(), r, ModeProbe, []byte("{}"))
				if err == nil && res.ExitCode != 0 {
					err = errors.New(string(res.Stderr))
				}
				errs <- err
			}()
		}
		for k := 0; k < 4; k++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if n := r.installs(); n != 1 {
			t.Fatalf("round %d: %d installs for 4 concurrent calls, want 1", i, n)
		}
	}
}

// lockedRunner is shRunner safe for concurrent calls, counting the installs.
type lockedRunner struct {
	mu sync.Mutex
	n  int
}

func (r *lockedRunner) Run(ctx context.Context, c guest.Cmd) (guest.Result, error) {
	if strings.Contains(strings.Join(c.Argv, " "), "sha256sum -c") {
		r.mu.Lock()
		r.n++
		r.mu.Unlock()
	}
	return (&shRunner{}).Run(ctx, c)
}

func (r *lockedRunner) installs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// TestHelperGivenDigest: with the digest bring-up computed when it checked lev, a call
// into a guest that has the copy runs it; an install reads lev's bytes and refuses them
// when they no longer match that digest (lev replaced on the host since the check).
func TestHelperGivenDigest(t *testing.T) {
	lev, _, sum, dir := cacheFixture(t)
	ctx := context.Background()
	res, err := (&Helper{Lev: lev, Dir: dir, Digest: hex.EncodeToString(sum[:])}).Run(ctx, &shRunner{}, ModeProbe, []byte("{}"))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("control: %v %s", err, res.Stderr)
	}
	os.RemoveAll(dir)
	_, err = (&Helper{Lev: lev, Dir: dir, Digest: strings.Repeat("0", 64)}).Run(ctx, &shRunner{}, ModeProbe, []byte("{}"))
	if err == nil || !strings.Contains(err.Error(), "changed since lever checked it") {
		t.Fatalf("a lev that no longer matches its digest: %v", err)
	}
}

// TestHelperEnsure runs Ensure's look and the install with a real shell: a guest without
// the copy is looked into and then gets it (2 calls, lev's bytes in the second); the next
// Helper finds it in one call that carries nothing; a copy someone else owns is left for
// the helper call to refuse (no install over it).
func TestHelperEnsure(t *testing.T) {
	lev, bin, sum, dir := cacheFixture(t)
	cached := filepath.Join(dir, "lev-"+hex.EncodeToString(sum[:16]))
	ctx := context.Background()

	r := &shRunner{}
	if err := (&Helper{Lev: lev, Dir: dir}).Ensure(ctx, r); err != nil {
		t.Fatal(err)
	}
	if len(r.calls) != 2 || len(r.calls[0].Stdin) != 0 || !bytes.Equal(r.calls[1].Stdin, bin) {
		t.Fatalf("a guest without lev: %d calls, want the look then the install", len(r.calls))
	}
	if got, _ := os.ReadFile(cached); !bytes.Equal(got, bin) {
		t.Fatal("the installed lev is not the binary lever was given")
	}

	r = &shRunner{}
	h := &Helper{Lev: lev, Dir: dir}
	if err := h.Ensure(ctx, r); err != nil || len(r.calls) != 1 || len(r.calls[0].Stdin) != 0 {
		t.Fatalf("a guest with lev: %v, %d calls (want 1, carrying nothing)", err, len(r.calls))
	}
	// and the helper call that follows runs it without installing again
	if res, err := h.Run(ctx, r, ModeProbe, []byte("{}\n")); err != nil || res.ExitCode != 0 || len(r.calls) != 2 {
		t.Fatalf("run after the look: %v exit %d, %d calls", err, res.ExitCode, len(r.calls))
	}

	os.Chown(cached, 65534, 65534)
	r = &shRunner{}
	if err := (&Helper{Lev: lev, Dir: dir}).Ensure(ctx, r); err != nil || len(r.calls) != 1 {
		t.Fatalf("a copy owned by uid 65534: %v, %d calls (want the look only)", err, len(r.calls))
	}
	if fi, _ := os.Stat(cached); fi.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Fatal("the copy someone else owns was replaced")
	}
}

// cacheFixture is a cache test's setup (root only: the cache is root's): a stand-in lev,
// its bytes and digest, and a cache dir that does not exist yet.
func cacheFixture(t *testing.T) (lev string, bin []byte, sum [32]byte, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the cache is root's")
	}
	lev = echoLev(t)
	bin, _ = os.ReadFile(lev)
	return lev, bin, sha256.Sum256(bin), filepath.Join(t.TempDir(), "lever", "bin")
}

// TestHelperLookPart runs the look a boot's call carries (LookPart) with a real shell in
// a sections script: a guest without lev is found without it (the install follows), one
// with it is found with it (no install: the helper call that follows runs it), a copy
// someone else owns counts as found (the helper call refuses it, naming it), and an
// answer without the section says nothing.
func TestHelperLookPart(t *testing.T) {
	lev, _, sum, dir := cacheFixture(t)
	cached := filepath.Join(dir, "lev-"+hex.EncodeToString(sum[:16]))
	ctx := context.Background()
	look := func(h *Helper) guest.Sections {
		t.Helper()
		part := h.LookPart()
		if part == "" {
			t.Fatal("no look part")
		}
		sc := guest.NewScript(part)
		res, err := (&shRunner{}).Run(ctx, sc.Cmd(nil))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("the look's script: %v exit %d: %s", err, res.ExitCode, res.Stderr)
		}
		secs, err := sc.Parse(res.Stdout)
		if err != nil {
			t.Fatal(err)
		}
		return secs
	}

	h := &Helper{Lev: lev, Dir: dir}
	if found, ok := h.Looked(look(h)); found || !ok {
		t.Fatalf("a guest without lev: found %v ok %v", found, ok)
	}
	r := &shRunner{}
	if _, err := h.Run(ctx, r, ModeProbe, []byte("{}\n")); err != nil || len(r.calls) != 3 {
		t.Fatalf("not found: the helper call installs it (%v, %d calls: want missing, install, run)", err, len(r.calls))
	}

	h = &Helper{Lev: lev, Dir: dir}
	if found, ok := h.Looked(look(h)); !found || !ok {
		t.Fatalf("a guest with lev: found %v ok %v", found, ok)
	}
	r = &shRunner{}
	if res, err := h.Run(ctx, r, ModeProbe, []byte("{}\n")); err != nil || res.ExitCode != 0 || len(r.calls) != 1 {
		t.Fatalf("found: the helper call runs it at once (%v exit %d, %d calls)", err, res.ExitCode, len(r.calls))
	}

	os.Chown(cached, 65534, 65534)
	h = &Helper{Lev: lev, Dir: dir}
	if found, ok := h.Looked(look(h)); !found || !ok {
		t.Fatalf("a copy owned by uid 65534: found %v ok %v (want found: the helper call refuses it)", found, ok)
	}
	if res, err := h.Run(ctx, &shRunner{}, ModeProbe, []byte("{}\n")); err != nil || res.ExitCode != 1 || !strings.Contains(string(res.Stderr), "not root's alone") {
		t.Fatalf("the helper call on a copy someone else owns: %v exit %d %s", err, res.ExitCode, res.Stderr)
	}

	if found, ok := (&Helper{Lev: lev, Dir: dir}).Looked(guest.Sections{"other": {}}); found || ok {
		t.Fatalf("no look in the answer: found %v ok %v", found, ok)
	}
	if p := (&Helper{Lev: lev, Dir: dir, InPlace: true}).LookPart(); p != "" {
		t.Fatalf("in place: a look part %q", p)
	}
}
