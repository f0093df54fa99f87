package labels

// Walks of a tree: finding labelled data that moved into it (a rename or link made outside
// lev's file tools), and labelling what a command that could read the tree changed in it.

import (
	"errors"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// MaxWalk bounds the entries one walk visits. A tree past it is not walked whole: the
// answer fails closed (moved: every candidate's label; MarkChanged: the whole tree).
var MaxWalk = 200000

var errWalkCap = errors.New("walk cap reached")

// walk calls f for every entry under dir (dir included), never following a symbolic link,
// skipping lev's own state (its records are labelled by run), and stops at MaxWalk.
func (s *Store) walk(dir string, f func(path string, fi fs.FileInfo)) error {
	n := 0
	skip := append([]string{clean(s.Runs)}, s.State...)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // vanished or unreadable: nothing lev could label there either
		}
		if n++; n > MaxWalk {
			return errWalkCap
		}
		if d.IsDir() && p != dir {
			for _, x := range skip {
				if x != "" && x != "." && fspath.Within(clean(x), p) {
					return filepath.SkipDir
				}
			}
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		f(p, fi)
		return nil
	})
}

// moved is the highest label of a labelled identity (above l, the label dir already
// has) that now lives under dir under a name lev never stored: renamed or linked there
// by a shell command or by hand. Called with the store's lock held.
func (s *Store) moved(st *state, dir string, l taint.Level) taint.Level {
	type id struct{ dev, ino uint64 }
	cand := map[id]taint.Level{}
	top := taint.Public
	for _, e := range st.Files {
		if e.Ino != 0 && e.Level > l {
			k := id{e.Dev, e.Ino}
			cand[k] = taint.Max(cand[k], e.Level)
			top = taint.Max(top, e.Level)
		}
	}
	if len(cand) == 0 {
		return taint.Public
	}
	found := taint.Public
	err := s.walk(dir, func(_ string, fi fs.FileInfo) {
		if dev, ino, _, ok := fileID(fi); ok {
			found = taint.Max(found, cand[id{dev, ino}])
		}
	})
	if errors.Is(err, errWalkCap) {
		return top
	}
	return found
}

// Snapshot is what a tree held before a command ran: each entry's identity and
// status-change time (ctime: set by every write, rename, link and chmod, and not settable
// by a process). Whole: the tree was too big to walk, so all of it counts as changed.
type Snapshot struct {
	dir   string
	files map[string]stamp
	whole bool
}

type stamp struct {
	dev, ino uint64
	ctime    time.Time
}

// Snapshot records dir's entries before a command that may change them runs.
func (s *Store) Snapshot(dir string) *Snapshot {
	snap := &Snapshot{dir: dir, files: map[string]stamp{}}
	err := s.walk(dir, func(p string, fi fs.FileInfo) {
		dev, ino, ctime, ok := fileID(fi)
		if ok {
			snap.files[p] = stamp{dev, ino, ctime}
		}
	})
	if err != nil {
		snap.whole = true
	}
	return snap
}

// MarkChanged labels, at l, every file and directory under the snapshot's tree that is new
// or changed since it was taken: what a shell command or stdio MCP server, able to read
// data at l, created, wrote, renamed or linked. A copy or transform made by the shell thus
// carries its source's label, which no file tool saw. Labels at or below Internal (every
// workdir file's default) are not stored. A tree too big to walk is marked whole. It
// returns how many entries it labelled.
func (s *Store) MarkChanged(before *Snapshot, l taint.Level) (int, error) {
	if l <= taint.Internal || before == nil {
		return 0, nil
	}
	var changed []entry
	whole := before.whole
	if !whole {
		err := s.walk(before.dir, func(p string, fi fs.FileInfo) {
			dev, ino, ctime, ok := fileID(fi)
			if was, seen := before.files[p]; ok && seen && was == (stamp{dev, ino, ctime}) {
				return
			}
			changed = append(changed, entry{Path: p, Dev: dev, Ino: ino, Level: l})
		})
		whole = err != nil
	}
	if whole {
		changed = []entry{{Path: before.dir, Under: true, Level: l}}
	}
	err := s.update(func(st *state) bool {
		have := map[entry]bool{}
		for _, e := range st.Files {
			have[e] = true
		}
		added := false
		for _, c := range changed {
			if !have[c] {
				st.Files = append(st.Files, c)
				added = true
			}
		}
		return added
	})
	if err != nil {
		return 0, err
	}
	return len(changed), nil
}
