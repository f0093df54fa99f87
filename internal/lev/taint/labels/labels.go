// Package labels keeps taint labels for data that has left a run's live context: the run
// records lev writes (runs/<id>/...) and the files lev's write_file and edit_file put in a
// workdir. Data keeps the highest label it ever had wherever it is stored, so a later run
// (or the same run after its context evicted the original) that reads it back takes that
// label again instead of the workdir's default Internal.
//
// The labels live in one small JSON file in lev's own state directory, never in the tree an
// agent works on: an agent that could edit a label could launder its data by editing it.
//
// What is tracked, and how:
//   - A run's records carry the run's high-water label (the highest its context ever had);
//     any path under runs/<id>/ reads at that label. A path under the runs directory with no
//     label (an unknown run, the runs directory itself), or anywhere else in lev's state,
//     reads Private: unlabelled lev state fails closed.
//   - A file written by write_file or edit_file gets the writing run's label, keyed on its
//     real path and its identity (device and inode). A read takes the highest label of any
//     entry for that path or that identity, so a rename or hard link made later (by a shell
//     command, say) still carries it. A label is only ever lowered when write_file replaces
//     the file's whole content from a context at a lower label.
//   - A listing or a command that can read a whole tree (Tree) takes the labels of paths
//     under it, of paths labelled data used to have there (Was), and of labelled identities
//     found under it by a walk (moved), so a renamed or linked file is seen wherever it is.
//   - Files a shell command (or a stdio MCP server) created or changed are labelled with
//     what that command could read (MarkChanged): a copy, a transform or a move by the
//     shell carries the label of its source.
//
// It owns the label store file and its lookups. It must not keep labels anywhere an
// agent's tools can write.
package labels

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/lev/taint"
)

// Store is the label file plus where lev's state lives.
type Store struct {
	// Path is the label file (in lev's state directory).
	Path string
	// Runs is the runs directory: runs/<id>/... reads at run id's label.
	Runs string
	// State are lev's other state directories (its home): reads there are Private.
	State []string
}

// entry is one labelled file. Ino == 0 means the identity is not known (a label stamped
// before the file was written); Path == "" means only the identity is (the path was later
// rewritten, but the labelled inode may live on under another name).
//
// Was keeps the path an identity-only entry used to have: the data may have moved anywhere
// under it (renamed, copied by a shell command before its path was reused), so a command
// that can read the tree holding Was still reads it (Tree with contents). Under marks a
// whole tree: everything at or under Path reads at least Level (MarkChanged's fail-closed
// answer to a tree too big to walk).
type entry struct {
	Path  string      `json:"path,omitempty"`
	Was   string      `json:"was,omitempty"`
	Under bool        `json:"under,omitempty"`
	Dev   uint64      `json:"dev,omitempty"`
	Ino   uint64      `json:"ino,omitempty"`
	Level taint.Level `json:"level"`
}

type state struct {
	Runs  map[string]taint.Level `json:"runs"`
	Files []entry                `json:"files"`
}

// Every Store on one file in this process shares a lock: runs of one daemon update the
// file concurrently, and a load-modify-save must not lose another run's label.
var (
	locksMu sync.Mutex
	locks   = map[string]*sync.Mutex{}
	// cache holds the last parsed state per file, reused while the file's size, mtime and
	// inode are unchanged (read under the file's lock; JSON parsing dominated a lookup).
	cache = map[string]cached{}
)

type cached struct {
	size, mtime int64
	ino         uint64
	st          *state
}

func (s *Store) lock() func() {
	locksMu.Lock()
	m := locks[s.Path]
	if m == nil {
		m = &sync.Mutex{}
		locks[s.Path] = m
	}
	locksMu.Unlock()
	m.Lock()
	return m.Unlock
}

// load reads the state; called with the file's lock held. The result is a private copy.
func (s *Store) load() (*state, error) {
	fi, err := os.Stat(s.Path)
	if err == nil {
		_, ino, _ := identity(s.Path)
		locksMu.Lock()
		c, ok := cache[s.Path]
		locksMu.Unlock()
		if ok && c.size == fi.Size() && c.mtime == fi.ModTime().UnixNano() && c.ino == ino {
			return c.st.clone(), nil
		}
	}
	st := &state{Runs: map[string]taint.Level{}}
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading taint labels %s: %w", s.Path, err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("reading taint labels %s: %w", s.Path, err)
	}
	if st.Runs == nil {
		st.Runs = map[string]taint.Level{}
	}
	s.remember(st)
	return st.clone(), nil
}

func (s *Store) remember(st *state) {
	fi, err := os.Stat(s.Path)
	if err != nil {
		return
	}
	_, ino, _ := identity(s.Path)
	locksMu.Lock()
	cache[s.Path] = cached{size: fi.Size(), mtime: fi.ModTime().UnixNano(), ino: ino, st: st.clone()}
	locksMu.Unlock()
}

func (st *state) clone() *state {
	c := &state{Runs: make(map[string]taint.Level, len(st.Runs)), Files: append([]entry(nil), st.Files...)}
	for k, v := range st.Runs {
		c.Runs[k] = v
	}
	return c
}

func (s *Store) save(st *state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("recording taint labels %s: %w", s.Path, err)
	}
	if err := os.MkdirAll(filepath.Dir(s.Path), 0o700); err != nil {
		return fmt.Errorf("recording taint labels %s: %w", s.Path, err)
	}
	tmp := s.Path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("recording taint labels %s: %w", s.Path, err)
	}
	if err := os.Rename(tmp, s.Path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("recording taint labels %s: %w", s.Path, err)
	}
	s.remember(st)
	return nil
}

// update applies f under the lock and saves when f reports a change.
func (s *Store) update(f func(*state) bool) error {
	defer s.lock()()
	st, err := s.load()
	if err != nil {
		return err
	}
	if !f(st) {
		return nil
	}
	return s.save(st)
}

// RaiseRun raises run id's label to at least l. Call it before writing a record that holds
// data at l: a crash in between leaves a label at least as high as the data.
func (s *Store) RaiseRun(id string, l taint.Level) error {
	return s.update(func(st *state) bool {
		if cur, ok := st.Runs[id]; ok && l <= cur {
			return false
		}
		st.Runs[id] = l
		return true
	})
}

// BeforeWrite stamps path with at least l before a file tool writes it, so a failure to
// record the written file's identity afterwards still leaves the path labelled. Labels at
// or below Internal (the default of every workdir file) are not stored.
func (s *Store) BeforeWrite(path string, l taint.Level) error {
	if l <= taint.Internal {
		return nil
	}
	return s.update(func(st *state) bool {
		st.Files = append(st.Files, entry{Path: path, Level: l})
		return true
	})
}

// AfterWrite records that path now holds data at l. With replaced (write_file: the whole
// content came from the writer's context), older labels of this path and of the inode it
// now is are dropped; labels of an inode that used to be at this path are kept under that
// inode alone, since it may live on elsewhere. Without replaced (edit_file), l must already
// include the file's earlier label.
func (s *Store) AfterWrite(path string, l taint.Level, replaced bool) error {
	dev, ino, ok := identity(path)
	return s.update(func(st *state) bool {
		if !replaced {
			l = taint.Max(l, s.fileLevel(st, path, dev, ino, ok))
		}
		kept := st.Files[:0]
		for _, e := range st.Files {
			sameID := ok && e.Ino != 0 && e.Dev == dev && e.Ino == ino
			switch {
			case sameID:
				continue // this inode's content was rewritten: its new label is l
			case e.Path == path && e.Ino == 0:
				continue // the stamp taken before the write
			case e.Path == path && !e.Under:
				// A former inode of this path: keep its label by identity, and the path
				// it had for the commands that can read wherever it went.
				e.Was, e.Path = e.Path, ""
			}
			kept = append(kept, e)
		}
		st.Files = kept
		if l > taint.Internal {
			ne := entry{Path: path, Level: l}
			if ok {
				ne.Dev, ne.Ino = dev, ino
			}
			st.Files = append(st.Files, ne)
		}
		return true
	})
}

// File is the stored label of what reading path (a real path) yields: the run's label
// under the runs directory, Private elsewhere in lev's state, else the highest label of a
// written file entry for that path or identity; taint.Public when nothing is stored. An
// unreadable label file fails closed (Private, with the error).
func (s *Store) File(path string) (taint.Level, error) {
	defer s.lock()()
	st, err := s.load()
	if err != nil {
		return taint.Private, err
	}
	if l, ok := s.stateLevel(st, path); ok {
		return l, nil
	}
	dev, ino, ok := identity(path)
	return s.fileLevel(st, path, dev, ino, ok), nil
}

// Tree is the highest label of anything stored at or under dir: what a directory listing
// may yield (names only: a tainted run chose the names of the files it wrote), or, with
// contents, what a command that can read the whole tree may yield (then the records of
// lev's runs inside dir count too).
func (s *Store) Tree(dir string, contents bool) (taint.Level, error) {
	defer s.lock()()
	st, err := s.load()
	if err != nil {
		return taint.Private, err
	}
	if l, ok := s.stateLevel(st, dir); ok {
		return l, nil
	}
	l := taint.Public
	for _, e := range st.Files {
		if e.Under && e.Path != "" && (fspath.Within(e.Path, dir) || fspath.Within(dir, e.Path)) {
			l = taint.Max(l, e.Level) // a marked tree holding dir, or inside it
		}
	}
	if !contents {
		for _, e := range st.Files {
			if e.Path != "" && fspath.Within(dir, e.Path) && e.Path != dir {
				l = taint.Max(l, e.Level)
			}
		}
		return taint.Max(l, s.moved(st, dir, l)), nil
	}
	if s.Runs != "" && fspath.Within(dir, clean(s.Runs)) {
		// lev's runs directory lies inside dir (a jail's tree holds LEV_HOME): every run's
		// records are reachable. lev's other state (token, config) is guarded by the
		// write/read protection, not by a label: it holds no run's data.
		l = taint.Max(l, s.allRuns(st))
	}
	for _, e := range st.Files {
		if (e.Path != "" && fspath.Within(dir, e.Path)) || (e.Was != "" && fspath.Within(dir, e.Was)) {
			l = taint.Max(l, e.Level)
		}
	}
	return taint.Max(l, s.moved(st, dir, l)), nil
}

// stateLevel labels a path inside lev's own state.
func (s *Store) stateLevel(st *state, path string) (taint.Level, bool) {
	if s.Runs != "" && fspath.Within(clean(s.Runs), path) {
		rel, _ := filepath.Rel(clean(s.Runs), path)
		id, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		if l, ok := st.Runs[id]; ok && id != "." && l.Valid() {
			return l, true
		}
		if id == "." {
			return s.allRuns(st), true
		}
		return taint.Private, true // an unlabelled run: fail closed
	}
	for _, d := range s.State {
		if d != "" && fspath.Within(clean(d), path) {
			return taint.Private, true
		}
	}
	return 0, false
}

// allRuns is the highest label over the runs directory's entries; one with no label (or
// an unreadable directory) is Private.
func (s *Store) allRuns(st *state) taint.Level {
	ents, err := os.ReadDir(s.Runs)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return taint.Private
	}
	l := taint.Public
	for _, e := range ents {
		rl, ok := st.Runs[e.Name()]
		if !ok {
			return taint.Private
		}
		l = taint.Max(l, rl)
	}
	return l
}

func (s *Store) fileLevel(st *state, path string, dev, ino uint64, ok bool) taint.Level {
	l := taint.Public
	for _, e := range st.Files {
		if e.Path == path || (ok && e.Ino != 0 && e.Dev == dev && e.Ino == ino) || (e.Under && e.Path != "" && fspath.Within(e.Path, path)) {
			l = taint.Max(l, e.Level)
		}
	}
	return l
}

func clean(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}
