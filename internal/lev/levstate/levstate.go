// Package levstate knows which files are lev's own state (its home, config, token, keys,
// policy, agents and run records) and answers one question for every tool: does this
// path, or this file, belong to lev? No tool may read or write such a file: reading the
// token lets an agent drive the daemon's API, and writing config, policy, blueprints or
// records changes what a later run loads.
//
// Paths are made absolute and symlink-resolved once, when the set is built. A file met
// under another name is compared by device and inode with lev's files as they are when it
// is asked about, so a hard link made elsewhere is still lev's file.
//
// It only answers; the pipeline, workfs and the sandbox's mask enforce the answer. It must
// not let a grant open anything but run records, and then only for reading.
package levstate

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"

	"github.com/lever-jail/lever/internal/fspath"
)

// Entry is one protected path: a file, or a directory and everything under it.
type Entry struct {
	Path string // absolute, symlink-resolved (as far as it exists)
	What string // e.g. "lev's home", "the daemon token"
}

type fileID struct{ dev, ino uint64 }

// State is the protected set for one run.
type State struct {
	Home    string
	entries []Entry
	// files are lev's regular files (a protected file, or one directly in a protected
	// directory), by path: CoversFile stats them when asked, not when the set was built.
	// lev rewrites some of them by rename (taint-labels.json), which gives the name a new
	// inode and frees the old one: an identity taken once would miss a link to the new
	// file, and the filesystem may give the freed inode number to a file the agent then
	// creates in the tree, which an identity taken once would refuse as lev's.
	files []Entry
	// dirs are the protected directories by device and inode: a descriptor's ancestors
	// are compared with them, so a directory reached under a name the path checks do not
	// know (a mount made later, another mount namespace's view) is still lev's.
	dirs map[fileID]string
	// records is lev's run-records directory: the only protected part a read may reach,
	// and only through a declared and granted [read_paths] entry (GrantableRead).
	records string
}

var (
	extraMu sync.Mutex
	extra   []Entry
)

// Register adds a path the daemon itself holds (the token file it was started with, say)
// to every State built afterwards.
func Register(path, what string) error {
	p, err := Resolve(path)
	if err != nil {
		return err
	}
	extraMu.Lock()
	defer extraMu.Unlock()
	extra = append(extra, Entry{Path: p, What: what})
	return nil
}

// Resolve makes p absolute (against the current directory) and resolves symlinks in the
// part of it that exists; the missing rest is appended lexically.
func Resolve(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty path")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	existing, rest := abs, ""
	for {
		if r, err := filepath.EvalSymlinks(existing); err == nil {
			return filepath.Join(r, rest), nil
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
}

// New builds the set from home (lev's home directory) and other paths, keyed by path,
// valued by what they are. Empty paths are skipped.
func New(home string, paths map[string]string) (*State, error) {
	s := &State{dirs: map[fileID]string{}}
	h, err := Resolve(home)
	if err != nil {
		return nil, fmt.Errorf("lev home %q: %w", home, err)
	}
	s.Home = h
	s.add(Entry{Path: h, What: "lev's home ($LEV_HOME)"})
	keys := make([]string, 0, len(paths))
	for p := range paths {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, p := range keys {
		if p == "" {
			continue
		}
		r, err := Resolve(p)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", paths[p], p, err)
		}
		s.add(Entry{Path: r, What: paths[p]})
	}
	extraMu.Lock()
	for _, e := range extra {
		s.add(e)
	}
	extraMu.Unlock()
	if mounts := readMounts(); len(mounts) > 0 {
		for _, e := range append([]Entry(nil), s.entries...) {
			for _, a := range aliases(e.Path, mounts) {
				s.add(Entry{Path: a, What: e.What + ", through another mount of " + e.Path})
			}
		}
	}
	return s, nil
}

func (s *State) add(e Entry) {
	for _, x := range s.entries {
		if x.Path == e.Path {
			return
		}
	}
	s.entries = append(s.entries, e)
	// Remember the files (not directories: a directory cannot be hard-linked) by inode, so
	// another name for the same file is refused too. Files under a protected directory
	// are remembered when they are regular files directly in it (the token, config.toml).
	s.remember(e.Path, e.What)
	if fi, err := os.Stat(e.Path); err == nil && fi.IsDir() {
		if id, ok := idOf(fi); ok {
			s.dirs[id] = fmt.Sprintf("%s is %s", e.Path, e.What)
		}
		if ents, err := os.ReadDir(e.Path); err == nil {
			for _, d := range ents {
				s.remember(filepath.Join(e.Path, d.Name()), e.What)
			}
		}
	}
}

func (s *State) remember(p, what string) {
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	s.files = append(s.files, Entry{Path: p, What: what})
}

func idOf(fi os.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, true
}

// Entries lists the protected paths.
func (s *State) Entries() []Entry { return append([]Entry(nil), s.entries...) }

// Paths lists the protected paths alone.
func (s *State) Paths() []string {
	out := make([]string, len(s.entries))
	for i, e := range s.entries {
		out[i] = e.Path
	}
	return out
}

// Covers says which protected entry real (an absolute, resolved path) falls under.
func (s *State) Covers(real string) (string, bool) {
	if s == nil {
		return "", false
	}
	for _, e := range s.entries {
		if fspath.Within(e.Path, real) {
			return fmt.Sprintf("%s is %s", e.Path, e.What), true
		}
	}
	return "", false
}

// CoversFile says whether fi (from stat or fstat) is one of lev's files, compared by device
// and inode with them as they are now: under another name (a hard link), or reached by a
// descriptor whose name the path checks did not see.
func (s *State) CoversFile(fi os.FileInfo) (string, bool) {
	if s == nil || fi == nil {
		return "", false
	}
	id, ok := idOf(fi)
	if !ok {
		return "", false
	}
	// A stat per file of lev's (a few dozen at most) on each call: the identities must be
	// today's (see files).
	for _, f := range s.files {
		if now, err := os.Stat(f.Path); err == nil {
			if nid, ok := idOf(now); ok && nid == id {
				return fmt.Sprintf("%s (%s)", f.Path, f.What), true
			}
		}
	}
	return "", false
}

// CoversDir says whether the directory with this device and inode is one of lev's
// protected directories (a descriptor's ancestor walk asks it, workfs).
func (s *State) CoversDir(dev, ino uint64) (string, bool) {
	if s == nil {
		return "", false
	}
	what, ok := s.dirs[fileID{dev, ino}]
	return what, ok
}

// SetRecords names lev's run-records directory (see GrantableRead).
func (s *State) SetRecords(dir string) error {
	r, err := Resolve(dir)
	if err != nil {
		return err
	}
	s.records = r
	return nil
}

// GrantableRead says whether real (an absolute, resolved path) lies in lev's run records
// and in no other protected entry nested inside them: a read a declared and granted
// [read_paths] entry may open (a planner reading ~/.leviath/runs; docs/lev.md, "lev's own state"). Everything
// else lev holds (token, keys, config, policy, blueprints, labels) no grant opens, and no
// write reaches records at all.
func (s *State) GrantableRead(real string) bool {
	if s == nil || s.records == "" || !fspath.Within(s.records, real) {
		return false
	}
	for _, e := range s.entries {
		if e.Path != s.records && fspath.Within(s.records, e.Path) && fspath.Within(e.Path, real) {
			return false
		}
	}
	return true
}

// Inside lists the protected entries that lie inside dir (a resolved path): the ones a
// sandbox sharing dir must mask.
func (s *State) Inside(dir string) []Entry {
	var out []Entry
	for _, e := range s.entries {
		if fspath.Within(dir, e.Path) {
			out = append(out, e)
		}
	}
	return out
}
