package sandbox

import (
	"context"
	"fmt"
	"github.com/lever-jail/lever/internal/lev/deathsig"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/lever-jail/lever/internal/fspath"
)

// Masking hides lev's own state (its home, token, keys, config) from commands that share
// the host's filesystem: kinds "none" and "namespace", and the "warn" fallback.
//
// The command runs in a new user, mount and PID namespace (with its own /proc, so the
// daemon's /proc/<pid>/environ, fd/ and root/ are not there to read). In it, an empty
// read-only tmpfs covers each protected directory and /dev/null each protected file.
// Then the command enters a second, nested user and mount namespace: mounts copied into
// a namespace owned by a less privileged user namespace are locked by the kernel, so
// `umount` inside cannot lift a mask (the technique bubblewrap uses). Without user
// namespaces there is no masking, and commands refuse to run (MaskUnavailableError).

// maskScript runs in the outer namespace: $1 is unshare, $2 the command, then the paths to
// mask, "--", and their ancestors to pin (see pins). It starts in the command's directory
// (the run's workdir).
//
// A protected path that does not exist yet (a policy file not written, a worker's lev home
// not created, $LEV_CONFIG pointing at a missing file) cannot be covered, and a command
// that may create it would choose what a later run loads. So its deepest existing
// ancestor is made read-only for the command (a recursive bind onto itself, remounted
// read-only; the nested namespace locks the flag). The workdir is bound onto itself first,
// so an ancestor that holds the workdir goes read-only around it while the workdir itself
// stays writable. "/" cannot be covered that way (a process's root is not looked up
// through mounts stacked on it): such a path refuses the command.
const maskScript = `set -e
unshare=$1; cmd=$2; shift 2
wd=$(pwd -P)
bound=
while [ $# -gt 0 ]; do
	p=$1; shift
	[ "$p" = -- ] && break
	if [ -d "$p" ]; then
		mount -t tmpfs -o ro,mode=000,size=4k lev-masked "$p"
	elif [ -e "$p" ]; then
		mount --bind -o ro /dev/null "$p"
	else
		a=$p
		while [ ! -e "$a" ]; do a=$(dirname "$a"); done
		if [ "$a" = / ]; then
			echo "lev: lev's state $p does not exist and its parent is /: it cannot be kept from this command; create it first" >&2
			exit 126
		fi
		if [ -z "$bound" ] && [ "$wd" != / ]; then
			mount --rbind "$wd" "$wd"
			bound=1
		fi
		mount --rbind "$a" "$a"
		mount -o remount,bind,ro "$a"
	fi
done
# After the masks: each ancestor of a protected path, bound onto itself (recursively, so
# the masks under it are copied), so the command cannot rename it and put a directory of
# its own where lev's state was (the masks would move away with the old name).
for d in "$@"; do
	[ -d "$d" ] && mount --rbind "$d" "$d"
done
# The current directory still points into the mounts as they were before: enter it again
# so relative paths go through the masks (and the workdir's new bind) too.
cd "$wd"
exec "$unshare" --user --map-root-user --mount -- sh -c "$cmd"`

// MaskArgv is the argv that runs script with mask hidden. network=false also gives it
// an empty network namespace (kind "namespace" with network = false).
func MaskArgv(unshare string, network bool, mask []string, script string) []string {
	argv := []string{unshare, "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child"}
	if !network {
		argv = append(argv, "--net")
	}
	mask = outermost(mask)
	argv = append(argv, "--", trustedSh(), "-c", maskScript, "lev-mask", unshare, script)
	argv = append(argv, mask...)
	argv = append(argv, "--")
	return append(argv, pins(mask)...)
}

// pins lists every ancestor directory of the masked paths (below /), parents first, each
// once. A mask is a mount on a path's dentry: renaming a parent directory carries the mask
// away with the old name and frees the path for a directory of the command's making (a
// worker's config.toml planted under its lev home, say). A mount point cannot be renamed
// in the namespace that holds it (EBUSY), so each ancestor is made one.
func pins(mask []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range mask {
		var chain []string
		for d := filepath.Dir(filepath.Clean(p)); d != "/" && d != "." && !seen[d]; d = filepath.Dir(d) {
			seen[d] = true
			chain = append(chain, d)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			out = append(out, chain[i])
		}
	}
	return out
}

// MaskUnavailableError says lev's state cannot be hidden from commands here.
type MaskUnavailableError struct{ Reason string }

func (e *MaskUnavailableError) Error() string {
	return fmt.Sprintf("cannot hide lev's own state (home, token, keys) from shell commands: %s; lev refuses to run commands on the host without it: enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0) and install util-linux's unshare, or use [sandbox] kind = \"container\"", e.Reason)
}

var (
	maskMu sync.Mutex
	maskOK = map[string]bool{}
)

// CheckMask probes once (per unshare binary) that masking works: a masked directory
// reads as empty and cannot be unmounted from inside.
func CheckMask(ctx context.Context, lookPath func(string) (string, error)) (string, error) {
	if runtime.GOOS != "linux" {
		return "", &MaskUnavailableError{"user namespaces exist only on Linux"}
	}
	if lookPath == nil {
		lookPath = TrustedLookPath
	}
	unshare, err := lookPath("unshare")
	if err != nil {
		return "", &MaskUnavailableError{"unshare (util-linux) not found on PATH"}
	}
	maskMu.Lock()
	defer maskMu.Unlock()
	if maskOK[unshare] {
		return unshare, nil
	}
	dir, err := os.MkdirTemp("", "lev-mask-probe-")
	if err != nil {
		return "", &MaskUnavailableError{err.Error()}
	}
	defer os.RemoveAll(dir)
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("probe"), 0o600); err != nil {
		return "", &MaskUnavailableError{err.Error()}
	}
	argv := MaskArgv(unshare, true, []string{dir}, "umount "+dir+" 2>/dev/null; cat "+secret+" 2>/dev/null; echo done")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = deathsig.Set(&syscall.SysProcAttr{}) // dies with lev
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", &MaskUnavailableError{fmt.Sprintf("probe failed: %v: %s", err, strings.TrimSpace(string(out)))}
	}
	if strings.Contains(string(out), "probe") || !strings.Contains(string(out), "done") {
		return "", &MaskUnavailableError{fmt.Sprintf("probe could still read a masked file: %q", out)}
	}
	maskOK[unshare] = true
	return unshare, nil
}

// trustedSh is the shell that runs the mask script, found like unshare (a fake sh on a
// writable PATH directory would run before any mask is in place).
func trustedSh() string {
	if p, err := TrustedLookPath("sh"); err == nil {
		return p
	}
	return "/bin/sh"
}

// outermost drops every path that lies inside another one of mask: a directory's mask
// (an empty tmpfs) already hides all of it, and a missing one's read-only ancestor keeps
// anything under it from being made. Fewer mounts per command.
func outermost(mask []string) []string {
	var out []string
	for i, p := range mask {
		inner := false
		for j, q := range mask {
			if i != j && fspath.Within(q, p) && (p != q || j < i) {
				inner = true
				break
			}
		}
		if !inner {
			out = append(out, p)
		}
	}
	return out
}
