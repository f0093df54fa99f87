package keyfile

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lever-jail/lever/internal/fspath"
)

// inTreeMount catches a bind mount of a directory inside the tree (not the tree itself,
// which the inode walk sees): by /proc/self/mountinfo, the file and the tree are placed on
// their file system (device and path from its root); the file lies in the tree when both
// are on the same one and the tree's path holds the file's.
func inTreeMount(real, path, tree string, refuse func() error) error {
	realTree, err := filepath.EvalSymlinks(tree)
	if err != nil {
		return nil // the inode walk above has stat'ed the tree; nothing more to learn
	}
	mounts, err := readMounts()
	if err != nil {
		return nil // no /proc: the other checks stand
	}
	kdev, kpath := place(mounts, real)
	tdev, tpath := place(mounts, realTree)
	if kdev != "" && kdev == tdev && fspath.Within(tpath, kpath) {
		return refuse()
	}
	return nil
}

type mount struct{ dev, root, point string }

func readMounts() ([]mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint ...
		fl := strings.Fields(sc.Text())
		if len(fl) < 5 {
			continue
		}
		out = append(out, mount{dev: fl[2], root: unescape(fl[3]), point: unescape(fl[4])})
	}
	return out, sc.Err()
}

// place is p's file system (device) and path from that file system's root, by the last
// listed mount whose mount point holds p (a later mount over the same point hides the
// earlier).
func place(mounts []mount, p string) (string, string) {
	best := -1
	for i, m := range mounts {
		if fspath.Within(m.point, p) && (best < 0 || len(m.point) >= len(mounts[best].point)) {
			best = i
		}
	}
	if best < 0 {
		return "", ""
	}
	m := mounts[best]
	rel, err := filepath.Rel(m.point, p)
	if err != nil {
		return "", ""
	}
	return m.dev, filepath.Join(m.root, rel)
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
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
