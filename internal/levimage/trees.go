package levimage

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
)

// DebianBase is the default workbench's base kind for WorkbenchRef: the guest's own
// Debian packages (its baseDigest is the guest's package-state digest,
// debroot.StateDigest).
const DebianBase = "debian"

// TreeName is the directory name, under the trees dir, of one of lever's trees: its kind
// ("lev", "bench"), the hex of ref's tag (after its last ':'), and 8 hex of the sha256 of
// the mount destinations of the containers that run it, sorted and joined by newlines
// (they are made in the tree: the runtime cannot make them in a root-owned tree, so a
// worker added later needs a tree with its dir). Bring-up on the host and the image
// helper in the guest both name trees with it, so a warm bring-up finds by its name, with
// no guest call, the tree the helper made.
func TreeName(kind, ref string, mounts []string) string {
	ms := append([]string(nil), mounts...)
	sort.Strings(ms)
	h := sha256.Sum256([]byte(strings.Join(ms, "\n")))
	return kind + "-" + ref[strings.LastIndexByte(ref, ':')+1:] + "-" + hex.EncodeToString(h[:4])
}
