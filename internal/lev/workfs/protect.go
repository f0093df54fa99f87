package workfs

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/lever-jail/lever/internal/fspath"
)

// Paths is a Protector over a list of paths (each a subtree), for a caller that holds
// paths rather than a levstate.State (the pipeline's Protected list). It knows each by
// its resolved path and by device and inode, as the State does; no grant opens any.
func Paths(paths []string) Protector {
	s := pathSet{ids: map[[2]uint64]string{}, dirs: map[[2]uint64]string{}}
	for _, p := range paths {
		if p == "" {
			continue
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		s.paths = append(s.paths, p)
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		id := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		if fi.IsDir() {
			s.dirs[id] = p + " is protected"
		} else if fi.Mode().IsRegular() {
			s.ids[id] = p
		}
	}
	return s
}

type pathSet struct {
	paths []string
	ids   map[[2]uint64]string
	dirs  map[[2]uint64]string
}

func (s pathSet) Covers(real string) (string, bool) {
	for _, p := range s.paths {
		if fspath.Within(p, real) {
			return p + " is protected", true
		}
	}
	return "", false
}

func (s pathSet) CoversFile(fi os.FileInfo) (string, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	p, ok := s.ids[[2]uint64{uint64(st.Dev), uint64(st.Ino)}]
	return fmt.Sprintf("%s, protected", p), ok
}

func (s pathSet) CoversDir(dev, ino uint64) (string, bool) {
	what, ok := s.dirs[[2]uint64{dev, ino}]
	return what, ok
}

func (pathSet) GrantableRead(string) bool { return false }

// Union protects what any of ps protects; a grantable read must be grantable in every
// one that covers it. A nil member is skipped.
func Union(ps ...Protector) Protector {
	var u union
	for _, p := range ps {
		if p != nil {
			u = append(u, p)
		}
	}
	return u
}

type union []Protector

func (u union) Covers(real string) (string, bool) {
	for _, p := range u {
		if what, ok := p.Covers(real); ok {
			return what, ok
		}
	}
	return "", false
}

func (u union) CoversFile(fi os.FileInfo) (string, bool) {
	for _, p := range u {
		if what, ok := p.CoversFile(fi); ok {
			return what, ok
		}
	}
	return "", false
}

func (u union) CoversDir(dev, ino uint64) (string, bool) {
	for _, p := range u {
		if dp, ok := p.(DirProtector); ok {
			if what, ok := dp.CoversDir(dev, ino); ok {
				return what, ok
			}
		}
	}
	return "", false
}

func (u union) GrantableRead(real string) bool {
	covered := false
	for _, p := range u {
		if _, ok := p.Covers(real); !ok {
			continue
		}
		covered = true
		if !p.GrantableRead(real) {
			return false
		}
	}
	return covered
}
