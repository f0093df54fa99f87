// Package mountcheck proves, as root in the guest, that a container the runtime has set
// up but not yet started holds at each of its in-tree mount points exactly the file or
// directory the tree holds at that path, reached without a symlink.
//
// Why after set-up and not before: the runtime resolves a bind mount's source when it
// mounts it, and the agents write the tree. A check of the source before the start leaves
// a window in which a running agent (the manager, while a worker is recreated) can swap a
// worker's dir for a symlink to the run user's runtime dir and back; the runtime then
// mounts the symlink's target and a check made before sees only the directory. Here the
// mounts are already made (podman init: the container's process exists, waiting, and has
// run nothing), so what is compared is what the container will see: the source, opened
// beneath the tree with no symlink allowed anywhere on the way, must be the very inode
// (device and inode number) found at the destination inside the container's root.
package mountcheck

import (
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"
)

// Request names the container's process (its pid in the guest, from podman inspect
// after init), the tree's path in the guest, and the mounts to prove.
type Request struct {
	Pid    int     `json:"pid"`
	Tree   string  `json:"tree"`
	Mounts []Mount `json:"mounts"`
}

// Mount is one bind mount of a path in the tree: Rel is the source relative to the tree
// ("." for the tree itself), Dest where the container has it, ReadOnly whether it was
// planned read-only.
type Mount struct {
	Rel      string `json:"rel"`
	Dest     string `json:"dest"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Serve reads a Request (strict JSON) from r and proves it; the error says which mount
// failed and how. It writes nothing on success.
func Serve(r io.Reader, _ io.Writer) error {
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	dec.DisallowUnknownFields()
	var req Request
	if err := dec.Decode(&req); err != nil {
		return fmt.Errorf("mount check: reading the request: %w", err)
	}
	return Check(req)
}

// validate refuses a request whose paths are not clean: a source climbing out of the
// tree, a relative destination.
func validate(req Request) error {
	if !path.IsAbs(req.Tree) {
		return fmt.Errorf("mount check: the tree %q is not an absolute path", req.Tree)
	}
	for _, m := range req.Mounts {
		if m.Rel != "." && (m.Rel == "" || path.IsAbs(m.Rel) || path.Clean(m.Rel) != m.Rel || m.Rel == ".." || strings.HasPrefix(m.Rel, "../")) {
			return fmt.Errorf("mount check: %q is not a clean path below the tree", m.Rel)
		}
		if !path.IsAbs(m.Dest) || path.Clean(m.Dest) != m.Dest {
			return fmt.Errorf("mount check: %q is not a clean absolute path in the container", m.Dest)
		}
	}
	return nil
}
