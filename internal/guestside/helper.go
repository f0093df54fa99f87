package guestside

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/lever-jail/lever/internal/guest"
	"github.com/lever-jail/lever/internal/levimage"
)

// CacheDir is where a VM guest keeps lever's lev for the helpers: root's, next to
// lever's other guest state. Each binary is named by its digest, written once and never
// changed, so a helper call names the exact bytes the host checked without sending them.
const CacheDir = levimage.InstalledLevDir

// missingCode is the exit status of a cached helper call that found no lev to run (the
// guest was reset, or this lever's lev was never installed there). lev itself exits 0, 1
// or 2, so it cannot be mistaken for the helper's own failure.
const missingCode = 113

// Helper runs lev's helper modes in one guest. On the netns substrate (InPlace) lev runs
// from its host path. In a VM, the first call installs lev in CacheDir (21 MiB over the
// guest link: 2.7 s under TCG) and every later call, of this bring-up or the next,
// runs that copy: one round trip carrying only the request. A Helper is safe for
// concurrent use; an install in flight makes the other calls wait for it rather than
// send the binary again.
type Helper struct {
	Lev     string // the Linux lev for the guest's architecture (the caller chose and checked it)
	InPlace bool
	// Dir overrides CacheDir (tests).
	Dir string
	// Digest is Lev's hex sha256 when the caller has it already (bring-up hashed lev when
	// it checked it): a call into a guest that has lev then reads nothing of the 21 MiB;
	// only an install does, and refuses bytes that no longer match.
	Digest string

	mu        sync.Mutex
	installed bool
	// installs counts the installs this Helper completed: a call that found no copy
	// installs again only when none completed since it looked (another call's install,
	// finished meanwhile, has put the copy there).
	installs int
	// missed: a helper call found the copy missing (Looked then leaves installed alone:
	// that call's install decides)
	missed bool
	bin    []byte // read once, when first needed (an install, or no Digest given)
	digest string
}

func (h *Helper) dir() string {
	if h.Dir != "" {
		return h.Dir
	}
	return CacheDir
}

// load finds lev's digest: the one given, or read and hashed once. Called with mu held.
func (h *Helper) load() error {
	if h.digest == "" && h.Digest != "" {
		h.digest = h.Digest
	}
	if h.digest != "" {
		return nil
	}
	return h.loadBin()
}

// loadBin reads lev's bytes once, checking them against the digest given. Called with mu
// held.
func (h *Helper) loadBin() error {
	if h.bin != nil {
		return nil
	}
	bin, err := os.ReadFile(h.Lev)
	if err != nil {
		return fmt.Errorf("reading the guest helper (lev) %s: %w", h.Lev, err)
	}
	sum := hex.EncodeToString(sha256Sum(bin))
	if h.digest != "" && sum != h.digest {
		return fmt.Errorf("the guest helper (lev) %s changed since lever checked it", h.Lev)
	}
	h.bin, h.digest = bin, sum
	return nil
}

func sha256Sum(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// path is where the guest keeps this lev (its digest's first 128 bits name it).
func (h *Helper) path() string { return h.dir() + "/lev-" + h.digest[:32] }

// InstalledPath is where this lev is installed in a VM guest ("" in place, or when lev
// cannot be read to name it). Bring-up's observation looks for it there, so a guest that
// has it gets no install.
func (h *Helper) InstalledPath() string { return h.named(h.path) }

// named is f's answer with lev's digest loaded (f names things by it), under the lock; ""
// in place, or when lev cannot be read to name it.
func (h *Helper) named(f func() string) string {
	if h.InPlace {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.load() != nil {
		return ""
	}
	return f()
}

// Run runs helper mode with req on its stdin, as root.
func (h *Helper) Run(ctx context.Context, r guest.Runner, mode string, req []byte) (guest.Result, error) {
	if !knownMode(mode) {
		return guest.Result{}, fmt.Errorf("unknown guest helper mode %q", mode)
	}
	if h.InPlace {
		argv, err := InPlaceArgv(h.Lev, mode)
		if err != nil {
			return guest.Result{}, err
		}
		return r.Run(ctx, guest.Cmd{As: guest.Root, Argv: argv, Stdin: req})
	}
	// waits for an install in flight, so this call does not race it into a second one
	h.mu.Lock()
	err := h.load()
	seen := h.installs
	h.mu.Unlock()
	if err != nil {
		return guest.Result{}, err
	}
	for attempt := 0; ; attempt++ {
		res, err := r.Run(ctx, guest.Cmd{As: guest.Root, Argv: h.cachedArgv(mode), Stdin: req})
		if err != nil || res.ExitCode != missingCode || !strings.Contains(string(res.Stderr), "lever: no cached lev") || attempt > 0 {
			return res, err
		}
		h.mu.Lock()
		if h.installs == seen {
			h.installed = false // gone since this Helper installed it
		}
		h.missed = true
		h.mu.Unlock()
		if err := h.Install(ctx, r); err != nil {
			return guest.Result{}, err
		}
	}
}

// cachedArgv runs the cached lev in mode, or exits missingCode when it is not there. The
// file is run only when it is root's, not a symlink, and no one else can write it; its
// directory was checked the same way when lev was installed, and only root can change it.
func (h *Helper) cachedArgv(mode string) []string {
	return []string{"/bin/sh", "-c", h.cacheChecks() + `exec "$f" ` + Command + ` ` + mode}
}

// cacheChecks is the shell that sets f to the cached lev and exits missingCode when it is
// not there (or its directory is not root's alone), 1 when it is not root's alone.
func (h *Helper) cacheChecks() string {
	return `f=` + h.path() + `; case $(stat -c '%u %A' ` + h.dir() + ` 2>/dev/null) in 0" "d????-??-?) ;; *) echo "lever: no cached lev $f (` + h.dir() + ` is not a directory only root can write)" >&2; exit ` + strconv.Itoa(missingCode) + `;; esac; ` +
		`if [ -L "$f" ] || [ ! -f "$f" ]; then echo "lever: no cached lev $f" >&2; exit ` + strconv.Itoa(missingCode) + `; fi; ` +
		`case $(stat -c '%u %a' "$f") in "0 755"|"0 700") ;; *) echo "lever: $f is not root's alone: refusing to run it" >&2; exit 1;; esac; `
}

// LookSection names the section LookPart prints.
const LookSection = "lever.helper"

// LookPart is Ensure's look as a part of a sections script (guest.Script) the caller
// runs as root anyway (bring-up adds it to the egress snapshot Lima takes after a boot):
// section LookSection, whose status is the look's (0: there). "" in place, or when lev
// cannot be read to name it.
func (h *Helper) LookPart() string {
	return h.named(func() string {
		// a subshell: the checks' exit ends it, not the script
		return "lever_helper_look() (\n" + h.cacheChecks() + "exit 0\n)\nsec " + LookSection + " lever_helper_look\n"
	})
}

// Looked reads LookPart's answer in secs, as Ensure reads its own call's: found when the
// copy is there (or there but not root's alone, which the helper call refuses, naming
// it), and then remembered as installed. ok is false when secs hold no such answer.
func (h *Helper) Looked(secs guest.Sections) (found, ok bool) {
	sec, ok := secs[LookSection]
	if !ok || h.InPlace {
		return false, false
	}
	return h.lookFound(sec.RC), true
}

// lookFound reads the look's exit status (Ensure's call, or LookPart's section): 0, there;
// 1, there but not root's alone (the helper call refuses it, naming it). Found, it is
// remembered as installed, unless a helper call has since found it missing (that call's
// install decides).
func (h *Helper) lookFound(rc int) bool {
	if rc != 0 && rc != 1 {
		return false
	}
	h.mu.Lock()
	if !h.missed {
		h.installed = true
	}
	h.mu.Unlock()
	return true
}

// Ensure makes sure the guest has this lev, for a guest the caller could not look into
// (one that was down: a restart after lever stop keeps the copy on its disk). It looks
// first, in a call that carries nothing, and installs only when the copy is missing: the
// look costs a fraction of a second, the install 15 MB through ssh (seconds under TCG).
// A copy someone else owns is left for the helper call to refuse.
func (h *Helper) Ensure(ctx context.Context, r guest.Runner) error {
	if h.InPlace {
		return nil
	}
	h.mu.Lock()
	err := h.load()
	installed := h.installed
	h.mu.Unlock()
	if err != nil || installed {
		return err
	}
	res, err := r.Run(ctx, guest.Cmd{As: guest.Root, Argv: []string{"/bin/sh", "-c", h.cacheChecks() + "exit 0"}})
	if err == nil && h.lookFound(res.ExitCode) {
		return nil
	}
	return h.Install(ctx, r)
}

// Install puts lev in the guest's cache (one call) unless this Helper already did. The
// copy is checked against the digest before it takes its name, so a cut-off transfer
// never becomes a helper; older lev copies there are removed. Every directory from
// /var/lib/lever down must be root's, not a symlink, and writable by no one else.
// Safe to start early, beside other steps: it writes a file and runs nothing of it.
func (h *Helper) Install(ctx context.Context, r guest.Runner) error {
	if h.InPlace {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.load(); err != nil {
		return err
	}
	if h.installed {
		return nil
	}
	if err := h.loadBin(); err != nil {
		return err
	}
	if _, err := guest.RunOK(ctx, r, guest.Cmd{As: guest.Root, Argv: h.installArgv(), Stdin: h.bin}); err != nil {
		return fmt.Errorf("installing lever's guest helper (lev) in the guest: %w", err)
	}
	h.installed = true
	h.installs++
	return nil
}

// installArgv reads exactly the binary from stdin into a private temporary name in the
// cache dir, checks its digest and renames it into place (0755: lever's lev tree can
// link it; mv -T replaces whatever has the name, a symlink to a directory too, never
// writing into it). Directories it makes are 0711 (the lev homes below /var/lib/lever
// need traversal by the run user's podman) and 0700 for the cache; mkdir -p, as the
// enrol and image helpers and provisioning may make /var/lib/lever at the same time. The
// file is written, then read again for its digest: hashing the stream as it lands,
// through tee, was slower under TCG (one more pipe hop for 15 MB beside sshd:
// docs/benchmarks-vm.md).
func (h *Helper) installArgv() []string {
	d := h.dir()
	top := d[:strings.LastIndexByte(d, '/')]
	script := `set -eu
umask 077
check() {
	if [ -L "$1" ] || [ ! -d "$1" ]; then echo "lever: $1 is not a directory" >&2; exit 1; fi
	case $(stat -c '%u %A' "$1") in
	0" "d????-??-?) ;;
	*) echo "lever: $1 is not a root-owned directory only root can write ($(stat -c '%U %A' "$1"))" >&2; exit 1;;
	esac
}
[ -L ` + top + ` ] || [ -d ` + top + ` ] || mkdir -p -m 0711 ` + top + `
check ` + top + `
[ -L ` + d + ` ] || [ -d ` + d + ` ] || mkdir -p -m 0700 ` + d + `
check ` + d + `
f=` + h.path() + `
# a transfer cut off by a signal (the EXIT trap does not run) leaves its temporary copy
for o in ` + d + `/.lev.*; do [ -e "$o" ] && find ` + d + ` -maxdepth 1 -ignore_readdir_race -name '.lev.*' -mmin +60 -delete; break; done
t=$(mktemp ` + d + `/.lev.XXXXXX)
trap 'rm -f "$t"' EXIT
head -c ` + strconv.Itoa(len(h.bin)) + ` >"$t"
echo "` + h.digest + `  $t" | sha256sum -c --status || { echo "lever: the lev copied into the guest does not match its digest (cut off?)" >&2; exit 1; }
chmod 0755 "$t"
mv -fT "$t" "$f"
trap - EXIT
for o in ` + d + `/lev-*; do [ "$o" = "$f" ] || rm -f "$o"; done
`
	return []string{"/bin/sh", "-c", script}
}

// Part is a sections-script part (guest.Script, run as root anyway) that defines shell
// function fn: helper mode with the function's stdin as its request, so a script the
// caller makes for other reasons carries a helper call with no round trip of its own
// (bring-up's observation proves the running containers' mounts this way). In place, lev
// runs from its checked host path; in a VM, the installed copy, the function exiting
// missingCode when there is none (the caller then makes the call itself, which installs).
func (h *Helper) Part(fn, mode string) (string, error) {
	if !knownMode(mode) {
		return "", fmt.Errorf("unknown guest helper mode %q", mode)
	}
	if h.InPlace {
		argv, err := InPlaceArgv(h.Lev, mode)
		if err != nil {
			return "", err
		}
		q := make([]string, len(argv))
		for i, a := range argv {
			q[i] = shQuote(a)
		}
		return fn + "() {\n\t" + strings.Join(q, " ") + "\n}\n", nil
	}
	h.mu.Lock()
	err := h.load()
	h.mu.Unlock()
	if err != nil {
		return "", err
	}
	// a subshell: the checks' exit ends it, not the script
	return fn + "() (\n" + h.cacheChecks() + `exec "$f" ` + Command + ` ` + mode + "\n)\n", nil
}

// shQuote is s as one sh word.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
