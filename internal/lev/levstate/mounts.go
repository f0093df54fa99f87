package levstate

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/fspath"
)

// Another mount of the same filesystem (a bind mount of the home directory elsewhere, a
// volume mounted twice) shows lev's state under a second path. Symlink resolution cannot
// see that: the second path is "real" too. So every protected path that exists is also
// protected under each path another mount gives it, found in /proc/self/mountinfo and
// confirmed by device and inode (a shadowed or stale mount adds nothing). The file tools,
// the shell's masks and the container mount checks all read the same set.

type mountInfo struct {
	dev, root, point string
}

// readMounts parses /proc/self/mountinfo; nil when it cannot be read (not Linux).
func readMounts() []mountInfo {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, mountInfo{dev: fields[2], root: unescape(fields[3]), point: unescape(fields[4])})
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space, \011, \012, \134).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// aliases lists the other paths at which p (absolute, resolved, existing) is visible
// through another mount of its filesystem.
func aliases(p string, mounts []mountInfo) []string {
	fi, err := os.Stat(p)
	if err != nil {
		return nil
	}
	id, ok := idOf(fi)
	if !ok {
		return nil
	}
	// The mount p is reached through: the deepest mount point holding it (the last one
	// listed wins for mounts stacked on the same point).
	var home *mountInfo
	for i := range mounts {
		m := &mounts[i]
		if fspath.Within(m.point, p) && (home == nil || len(m.point) >= len(home.point)) {
			home = m
		}
	}
	if home == nil {
		return nil
	}
	rel, err := filepath.Rel(home.point, p)
	if err != nil {
		return nil
	}
	fsPath := filepath.Join(home.root, rel) // p's path inside its filesystem
	seen := map[string]bool{p: true}
	var out []string
	for _, m := range mounts {
		if m.dev != home.dev || !fspath.Within(m.root, fsPath) {
			continue
		}
		r, err := filepath.Rel(m.root, fsPath)
		if err != nil {
			continue
		}
		alias := filepath.Join(m.point, r)
		if seen[alias] {
			continue
		}
		seen[alias] = true
		if afi, err := os.Stat(alias); err == nil {
			if aid, ok := idOf(afi); ok && aid == id {
				out = append(out, alias)
			}
		}
	}
	return out
}
