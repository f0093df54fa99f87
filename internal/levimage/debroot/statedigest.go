package debroot

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// StateDigestPart defines state_digest (statedigest.sh), the package-state digest the
// default workbench's tag derives from; bring-up's observation call folds it in, and
// StateDigest is the same digest read in Go (by the image helper, in the guest).
//
//go:embed statedigest.sh
var StateDigestPart string

// StateDigest is state_digest (statedigest.sh) of the system at root, byte for byte: the
// hex sha256 of dpkg's status file, the generated CA bundle and the /etc/alternatives
// links (a line "NAME TARGET" each, in C-locale order). A file that is missing
// contributes nothing; "" when there is no dpkg status (no dpkg database).
func StateDigest(root string) (string, error) {
	status, err := readStatus(root)
	if errors.Is(err, ErrNoDpkg) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return stateDigest(root, status), nil
}

// stateDigest is state_digest's sum over status (the status file's bytes, read once by
// the caller so the digest and what is planned from it are one read) and the rest.
func stateDigest(root string, status []byte) string {
	h := sha256.New()
	h.Write(status)
	// cat ... 2>/dev/null: what cannot be read (missing, a directory) adds nothing
	if b, err := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); err == nil {
		h.Write(b)
	}
	var links []string
	dir := filepath.Join(root, "etc/alternatives")
	if fi, err := os.Lstat(dir); err == nil {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			// find does not follow a symlinked starting point: it prints the link itself
			if t, err := os.Readlink(dir); err == nil {
				links = append(links, "alternatives "+t)
			}
		case fi.IsDir():
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.Type()&fs.ModeSymlink == 0 {
					continue
				}
				if t, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
					links = append(links, e.Name()+" "+t)
				}
			}
		}
	}
	sort.Strings(links) // LC_ALL=C sort: bytewise
	var b bytes.Buffer
	for _, l := range links {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	h.Write(b.Bytes())
	return hex.EncodeToString(h.Sum(nil))
}

// readStatus reads root's /var/lib/dpkg/status; ErrNoDpkg when it is not a regular file
// (a symlink to one counts, as for the shell's test -f).
func readStatus(root string) ([]byte, error) {
	p := filepath.Join(root, "var/lib/dpkg/status")
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || err == nil && !fi.Mode().IsRegular() {
		return nil, ErrNoDpkg
	}
	if err != nil {
		return nil, fmt.Errorf("reading the dpkg status: %w", err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading the dpkg status: %w", err)
	}
	return b, nil
}
