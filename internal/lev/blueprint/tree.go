package blueprint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/lever-jail/lever/internal/fspath"
)

// TreeDir is where a project keeps its own blueprints, relative to the run's workdir:
// `lev run NAME` looks there when the agents directory (the user's settings) has no NAME.
const TreeDir = ".lev/agents"

// MaxFile bounds a blueprint file read from a tree.
const MaxFile = 1 << 20

// Origins of a run's blueprint, kept in its record.
const (
	OriginAgents = "agents" // the user's agents directory ($LEV_AGENTS_DIR)
	OriginPath   = "path"   // a file named by its path, outside the workdir
	OriginTree   = "tree"   // a file in the run's workdir: somebody else's blueprint
)

// TreeFile is NAME's blueprint in workdir's tree.
func TreeFile(workdir, name string) (string, error) {
	if !nameRe.MatchString(name) {
		return "", fmt.Errorf("bad agent name %q", name)
	}
	return filepath.Join(workdir, TreeDir, name+".toml"), nil
}

// ReadTree reads a blueprint file that lies in a workdir the agents write: a regular file,
// reached without following a symlink at its last element, whose real path is inside the
// workdir (a `.lev` or `agents` directory that is a link out of the tree is refused too),
// at most MaxFile bytes. The bytes returned are the ones opened: a swap of the file after
// this read changes nothing, since the run keeps them as its snapshot.
func ReadTree(workdir, file string) ([]byte, error) {
	realWD, err := filepath.EvalSymlinks(workdir)
	if err != nil {
		return nil, fmt.Errorf("blueprint %s: workdir: %w", file, err)
	}
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("blueprint %s is a symlink: a blueprint in the tree must be a regular file in the tree", file)
		}
		return nil, fmt.Errorf("blueprint %s: %w", file, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("blueprint %s: %w", file, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("blueprint %s is not a regular file (%v)", file, st.Mode().Type())
	}
	// Where the descriptor really is, not where the path said: a directory above it may
	// be a link out of the tree, or be swapped for one between the lookup and the open.
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return nil, fmt.Errorf("blueprint %s: locating the opened file: %w", file, err)
	}
	if !fspath.Within(realWD, real) {
		return nil, fmt.Errorf("blueprint %s resolves to %s, outside the workdir %s: a blueprint in the tree must be a regular file in the tree", file, real, realWD)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	if err != nil {
		return nil, fmt.Errorf("blueprint %s: %w", file, err)
	}
	if len(data) > MaxFile {
		return nil, fmt.Errorf("blueprint %s is larger than %d bytes", file, MaxFile)
	}
	return data, nil
}

// MakeForeign marks a blueprint as somebody else's (found in the tree the agents write):
// it can only tighten what the user's config sets. Here: no install name (so no
// [agent_read_paths.NAME] table applies, whatever the file calls itself or wherever it
// sits), and no sandbox image of its choosing (a container image it names would be pulled
// and run on the user's engine). The grants (none at all) and the permissions (no
// pre-allowed web tools) are enforced where they are resolved, by Foreign.
// It returns what it dropped, for the run's log.
func MakeForeign(bp *Blueprint) []string {
	bp.Foreign = true
	bp.Installed = ""
	var notes []string
	if bp.Sandbox != nil && bp.Sandbox.Image != "" {
		notes = append(notes, fmt.Sprintf("[sandbox] image %q dropped: a blueprint from the tree does not choose the image", bp.Sandbox.Image))
		bp.Sandbox.Image = ""
	}
	for _, st := range bp.Order {
		if st.Sandbox != nil && st.Sandbox.Image != "" {
			notes = append(notes, fmt.Sprintf("[stages.%s.sandbox] image %q dropped: a blueprint from the tree does not choose the image", st.Name, st.Sandbox.Image))
			st.Sandbox.Image = ""
		}
	}
	return notes
}
