package netns

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"
)

// ClaimDir holds one file per run user naming the jail that owns it. On this substrate
// the run user is a host account: its podman service (whose network namespace is the one
// of the jail that started it, and every container it starts runs there), its container
// storage and its runtime dir with the agents' enrolment credentials
// (/run/user/<uid>/lever) are host state that a second jail naming the same user would
// share. So a jail claims its run user at `lever up`, and a user claimed by another jail
// is refused; the claim goes with `lever destroy`.
const ClaimDir = "/var/lib/lever-netns/run-users"

// liveRoots are where a jail's namespace and its /etc overlay live (tests replace them).
var liveRoots = []string{"/run/netns", "/etc/netns"}

// maxClaim bounds what is read of a claim file (a few short lines).
const maxClaim = 4096

// Claim is the owner a claim file names.
type Claim struct {
	Namespace string // the owning jail's namespace
	Instance  string // its instance name (lever.yaml's name)
}

func (c Claim) encode() []byte {
	return []byte("namespace=" + c.Namespace + "\ninstance=" + c.Instance + "\n")
}

func parseClaim(b []byte) (Claim, error) {
	var c Claim
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		switch k {
		case "namespace":
			c.Namespace = v
		case "instance":
			c.Instance = v
		}
	}
	if c.Namespace == "" {
		return c, errors.New("it names no namespace")
	}
	return c, nil
}

// claimPath is the run user's claim file.
func (b *Backend) claimPath() string { return filepath.Join(b.claimDir(), b.runner.RunUser) }

func (b *Backend) claimDir() string {
	if b.opts.ClaimDir != "" {
		return b.opts.ClaimDir
	}
	return ClaimDir
}

// ClaimOwner reads the run user's claim: ok is false when there is none.
func (b *Backend) ClaimOwner() (c Claim, ok bool, err error) {
	f, err := os.OpenFile(b.claimPath(), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Claim{}, false, nil
	}
	if err != nil {
		return Claim{}, false, fmt.Errorf("reading the claim on run user %s: %w", b.runner.RunUser, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxClaim))
	if err != nil {
		return Claim{}, false, fmt.Errorf("reading the claim on run user %s: %w", b.runner.RunUser, err)
	}
	c, err = parseClaim(data)
	if err != nil {
		return Claim{}, false, fmt.Errorf("claim file %s on run user %s: %w", b.claimPath(), b.runner.RunUser, err)
	}
	return c, true, nil
}

// OwnsRunUser reports whether this jail may remove its run user at destroy: it holds the
// claim, or nobody does (a jail made before claims existed). A user another jail claims
// is that jail's; owner names it.
func (b *Backend) OwnsRunUser() (owns bool, owner string, err error) {
	c, ok, err := b.ClaimOwner()
	if err != nil {
		return false, "", err
	}
	if ok && c.Namespace != b.ns {
		return false, c.describe(), nil
	}
	// The same account under another name, claimed by another live jail, is that jail's:
	// tearing it down (its processes are killed by uid) would wipe the other jail.
	if oc, other, _, shared, err := b.accountClaim(); err != nil {
		return false, "", err
	} else if shared {
		return false, fmt.Sprintf("%s (as run user %s, the same account)", oc.describe(), other), nil
	}
	return true, "", nil
}

func (c Claim) describe() string {
	if c.Instance != "" {
		return fmt.Sprintf("jail %s (namespace %s)", c.Instance, c.Namespace)
	}
	return "the jail of namespace " + c.Namespace
}

// live reports whether the claim's jail still exists: its namespace, or its /etc/netns
// overlay (a stopped jail keeps it until destroy).
func (c Claim) live() bool {
	for _, root := range liveRoots {
		if _, err := os.Lstat(filepath.Join(root, c.Namespace)); err == nil {
			return true
		}
	}
	return false
}

// ClaimRunUser makes this jail the run user's owner, or refuses: a user another live jail
// claims is never shared. A claim whose jail is gone (no namespace, no overlay: destroyed
// by a lever that predates claims, or by hand) is taken over. The claim directory is
// locked while it is read and written, so two concurrent ups cannot both win.
func (b *Backend) ClaimRunUser() error {
	dir := b.claimDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("netns backend: making the run-user claim directory: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("netns backend: opening %s: %w", dir, err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("netns backend: locking %s: %w", dir, err)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN)
	c, ok, err := b.ClaimOwner()
	if err != nil {
		return fmt.Errorf("netns backend: %w", err)
	}
	if ok && c.Namespace == b.ns {
		return nil
	}
	if ok && c.live() {
		return &SharedRunUserError{User: b.runner.RunUser, Owner: c, Claim: b.claimPath(), Jail: b.opts.Name}
	}
	if err := b.sameAccountClaimed(); err != nil {
		return err
	}
	mine := Claim{Namespace: b.ns, Instance: b.opts.Name}
	tmp := b.claimPath() + ".new"
	os.Remove(tmp)
	if err := os.WriteFile(tmp, mine.encode(), 0o644); err != nil {
		return fmt.Errorf("netns backend: writing the claim on run user %s: %w", b.runner.RunUser, err)
	}
	if err := os.Rename(tmp, b.claimPath()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("netns backend: writing the claim on run user %s: %w", b.runner.RunUser, err)
	}
	return nil
}

// releaseRunUser removes the claim if it is this jail's.
func (b *Backend) releaseRunUser() error {
	c, ok, err := b.ClaimOwner()
	if err != nil || !ok || c.Namespace != b.ns {
		return err
	}
	if err := os.Remove(b.claimPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the claim on run user %s: %w", b.runner.RunUser, err)
	}
	return nil
}

// SharedRunUserError is the refusal of a run user another jail owns.
type SharedRunUserError struct {
	User  string
	Owner Claim
	Claim string // the claim file
	Jail  string // the jail that was refused
}

func (e *SharedRunUserError) Error() string {
	return fmt.Sprintf("netns backend: run user %s already belongs to %s (claim %s); jail %s cannot share it: "+
		"both jails would share its podman service (which runs in the other jail's network namespace, so this jail's agents would run under the other jail's egress), "+
		"its containers and its agents' credentials under /run/user/<uid>/lever, and destroying either jail would remove them for both. "+
		"Set %s to a run user of this jail's own (e.g. %s=%s) or destroy the other jail first",
		e.User, e.Owner.describe(), e.Claim, e.Jail, RunUserEnv, RunUserEnv, SuggestRunUser(e.Jail))
}

// SuggestRunUser is a run user name of a jail's own: lever-<name>, cut to the 32
// characters a Linux user name may have (with a hash of the whole name when cut).
func SuggestRunUser(name string) string {
	u := "lever-" + name
	if len(u) <= 32 {
		return u
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s-%08x", u[:23], h.Sum32())
}

// runUserName is a user name as useradd takes it and as a claim file's name can hold it:
// a letter or "_" first (never all digits: `id -u 1001`, `getent passwd 1001` and
// `pkill -u 1001` take digits for a uid, so "1001" would name another jail's account
// under a claim of a different name), then letters, digits, ".", "_", "-"; at most 32.
var runUserName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}$`)

// checkRunUserName refuses a run user that is not a plain user name, before anything is
// made for it.
func checkRunUserName(u string) error {
	if !runUserName.MatchString(u) {
		return fmt.Errorf("netns backend: run user %q (%s): not a user name: a letter or \"_\" first, then letters, digits, \".\", \"_\" or \"-\", at most 32 characters", u, RunUserEnv)
	}
	return nil
}

// sameAccountClaimed refuses a run user whose account (uid) another live jail already
// claims under another name (two passwd entries for one uid, `useradd -o`): the account,
// not its spelling, is what the jails would share. Called with the claim directory locked.
func (b *Backend) sameAccountClaimed() error {
	c, other, uid, ok, err := b.accountClaim()
	if err != nil {
		return fmt.Errorf("netns backend: %w", err)
	}
	if !ok {
		return nil
	}
	return &SharedRunUserError{User: fmt.Sprintf("%s (uid %s, the account of run user %s)", b.runner.RunUser, uid, other),
		Owner: c, Claim: filepath.Join(b.claimDir(), other), Jail: b.opts.Name}
}

// accountClaim finds another live jail's claim, under another name, on this run user's
// account (the same uid). A run user with no account yet has nothing to share.
func (b *Backend) accountClaim() (c Claim, other, uid string, ok bool, err error) {
	me, err := user.Lookup(b.runner.RunUser)
	if err != nil {
		return Claim{}, "", "", false, nil
	}
	ents, err := os.ReadDir(b.claimDir())
	if errors.Is(err, fs.ErrNotExist) {
		return Claim{}, "", "", false, nil
	}
	if err != nil {
		return Claim{}, "", "", false, fmt.Errorf("reading %s: %w", b.claimDir(), err)
	}
	for _, e := range ents {
		name := e.Name()
		if name == b.runner.RunUser || strings.HasSuffix(name, ".new") || !runUserName.MatchString(name) {
			continue
		}
		if u, err := user.Lookup(name); err != nil || u.Uid != me.Uid {
			continue
		}
		o := &Backend{opts: b.opts, ns: b.ns, runner: &Runner{Namespace: b.ns, RunUser: name}}
		c, found, err := o.ClaimOwner()
		if err != nil {
			return Claim{}, "", "", false, err
		}
		if found && c.Namespace != b.ns && c.live() {
			return c, name, me.Uid, true, nil
		}
	}
	return Claim{}, "", "", false, nil
}
