package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The binaries that build a sandbox (unshare, sh, the container engine) are found on the
// daemon's PATH. A directory there that lev's user can write (~/.local/bin, ~/bin, a bin
// directory in a project) is one a shell command can write too: a fake unshare placed
// there would run the next command with nothing masked, a fake engine outside any
// container. So a sandbox binary is taken only from a PATH directory that lev's user
// cannot change: neither the file nor any directory above it is writable by this user.
// (A daemon running as root can change every file; see the residual in
// docs/lev-security.md: run lev as an unprivileged user.)

// TrustedLookPath is exec.LookPath restricted to files lev's user cannot replace.
func TrustedLookPath(name string) (string, error) {
	if strings.ContainsRune(name, '/') {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("%s: a sandbox binary must be named by an absolute path or found on PATH", name)
		}
		return trustedFile(name)
	}
	var skipped []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // "." or a relative entry: wherever the daemon happens to run
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			continue
		}
		if r, err := trustedFile(p); err == nil {
			return r, nil
		}
		skipped = append(skipped, p)
	}
	if len(skipped) > 0 {
		return "", fmt.Errorf("%s: found only where lev's user (and so an agent's command) can replace it (%s); install it in a directory lev's user cannot write", name, strings.Join(skipped, ", "))
	}
	return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// trustedFile resolves p and checks that neither it nor a directory above it is writable
// by this process's user.
func trustedFile(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	if os.Geteuid() == 0 {
		return real, nil // root can write everything; nothing to tell apart
	}
	for d := real; ; d = filepath.Dir(d) {
		if err := unix.Access(d, unix.W_OK); err == nil {
			return "", fmt.Errorf("%s is writable by lev's user", d)
		} else if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EROFS) && !errors.Is(err, unix.EPERM) {
			return "", fmt.Errorf("%s: %w", d, err)
		}
		if d == "/" {
			return real, nil
		}
	}
}
