package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lever-jail/lever/internal/lev/workfs"
)

// The search tools' caps (glob, grep), with the cap table in caps.go; docs/lev.md ("Tool
// caps") lists them.
const (
	// MaxWalkEntries bounds the directory entries one glob or grep call examines.
	MaxWalkEntries = 20000
	// MaxWalkDepth bounds how deep under its root a walk descends.
	MaxWalkDepth = 64
	// MaxGlobResults bounds the paths glob returns.
	MaxGlobResults = 2000
	// MaxGrepMatches bounds the matching lines grep returns (max_matches may lower it).
	MaxGrepMatches = 1000
	// MaxGrepBytes bounds the file content one grep call reads, all files together; each
	// file is read up to MaxReadBytes.
	MaxGrepBytes = 32 << 20
	// MaxGrepLineBytes bounds one line of grep's output.
	MaxGrepLineBytes = 512
	// MaxPatternBytes bounds a glob pattern or a grep regexp.
	MaxPatternBytes = 1024
)

// walker walks a directory tree inside the workdir for glob and grep, through the same
// checked descriptors the file tools read with. It never follows a symlink (a link is an
// entry, reported as such, never a directory to enter or a file to read), resolves and
// fences every directory it opens and every file it reads as read_file would, and refuses
// anything that resolves outside the workdir even where a [read_paths] grant covers it:
// only read_file, read_files and list_dir may leave the workdir.
type walker struct {
	tool string
	fs   *workfs.FS
	// seen counts the entries examined; stopped is set when MaxWalkEntries was reached.
	seen    int
	stopped bool
	// root is the walk's root, relative to the workdir (slash-separated; "." for the
	// workdir itself).
	root string
	// skipped counts the directories and files the fence refused (lev's own state inside
	// the workdir, a path swapped for a link mid-walk).
	skipped int
}

// entry is one directory entry met by the walk: rel is its path relative to the workdir,
// slash-separated, as the model passes it back to read_file.
type entry struct {
	rel  string
	kind fs.FileMode // fs.ModeDir, fs.ModeSymlink, or 0 for anything else
}

// errStop ends a walk early without an error (a cap was reached).
var errStop = errors.New("stop")

// walk visits every entry under root (an Access the fence step resolved inside the
// workdir), depth first, each directory's entries in name order.
func (w *walker) walk(ctx context.Context, root workfs.Access, visit func(e entry) error) error {
	rel, err := filepath.Rel(w.fs.Workdir, root.Real)
	if err != nil || root.Outside || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s: %s is outside the workdir", w.tool, root.Path)
	}
	w.root = filepath.ToSlash(rel)
	if st, serr := os.Lstat(root.Real); serr == nil && !st.IsDir() {
		// A file as the root: searched alone (grep path=file.go), as its parent's entry.
		w.root = path.Dir(w.root)
		w.seen++
		err = visit(entry{rel: filepath.ToSlash(rel)})
	} else {
		err = w.dir(ctx, w.root, 0, visit)
	}
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

func (w *walker) dir(ctx context.Context, rel string, depth int, visit func(e entry) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	acc, err := w.access(rel)
	if err != nil {
		w.skipped++
		return nil
	}
	ents, more, err := w.fs.ReadDir(w.tool, acc, MaxWalkEntries-w.seen)
	if err != nil {
		w.skipped++
		return nil
	}
	if more {
		// Only the first entries (in directory order) were read: the rest are past the cap.
		w.stopped = true
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, d := range ents {
		if w.seen >= MaxWalkEntries {
			w.stopped = true
			return errStop
		}
		w.seen++
		e := entry{rel: path.Join(rel, d.Name())}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			e.kind = fs.ModeSymlink
		case d.IsDir():
			e.kind = fs.ModeDir
		}
		if err := visit(e); err != nil {
			return err
		}
		if e.kind == fs.ModeDir && depth+1 < MaxWalkDepth {
			if err := w.dir(ctx, e.rel, depth+1, visit); err != nil {
				return err
			}
		}
	}
	return nil
}

// access resolves and fences a workdir-relative path as read_file's fence step would,
// and refuses it when it resolves outside the workdir (a directory or file swapped for a
// symlink after it was listed), granted or not.
func (w *walker) access(rel string) (workfs.Access, error) {
	acc, err := w.fs.ResolveRead(w.tool, filepath.Join(w.fs.Workdir, filepath.FromSlash(rel)))
	if err != nil {
		return acc, err
	}
	if acc.Outside {
		return acc, fmt.Errorf("%s: %s resolves outside the workdir", w.tool, rel)
	}
	return acc, nil
}

// notes are the walk's own truncation and skip notes, appended to a result.
func (w *walker) notes(b *strings.Builder) {
	if w.stopped {
		fmt.Fprintf(b, "[%s: stopped after examining %d entries, the walk cap (MaxWalkEntries); narrow path or the pattern]\n", w.tool, MaxWalkEntries)
	}
	if w.skipped > 0 {
		fmt.Fprintf(b, "[%s: skipped %d path(s) the read fence refuses (lev's own state, or a path that resolves outside the workdir)]\n", w.tool, w.skipped)
	}
}

// checkPattern validates a glob pattern: relative, slash-separated components, none of
// them . or .. (a pattern names paths under its root, never above or beside it), each a
// valid path.Match pattern or exactly **.
func checkPattern(name, pat string) error {
	if err := required(name, pat); err != nil {
		return err
	}
	if len(pat) > MaxPatternBytes {
		return fmt.Errorf("argument %q is %d bytes, over the %d-byte pattern cap (MaxPatternBytes)", name, len(pat), MaxPatternBytes)
	}
	if strings.HasPrefix(pat, "/") || strings.Contains(pat, "\\") {
		return fmt.Errorf("argument %q: %q must be a relative, slash-separated pattern (it is matched under path; set path to search elsewhere)", name, pat)
	}
	stars := 0
	for _, c := range strings.Split(pat, "/") {
		switch {
		case c == "**" && stars == maxDoubleStars:
			return fmt.Errorf("argument %q: %q has more than %d ** components", name, pat, maxDoubleStars)
		case c == "" || c == "." || c == "..":
			return fmt.Errorf("argument %q: %q has an empty, . or .. component: a pattern matches paths under path, never above it", name, pat)
		case c == "**":
			stars++
		case strings.Contains(c, "**"):
			return fmt.Errorf("argument %q: %q: ** must be a whole component (a/**/b)", name, pat)
		default:
			if _, err := path.Match(c, ""); err != nil {
				return fmt.Errorf("argument %q: %q: bad pattern component %q", name, pat, c)
			}
		}
	}
	return nil
}

// maxDoubleStars bounds the ** components of a pattern: each one multiplies the ways a
// path can be split against it, so a pattern of many could make one match cost
// MaxWalkDepth to that power.
const maxDoubleStars = 4

// matchGlob matches a slash-separated relative path against a checked pattern: * ? and
// [...] stay inside one component, ** matches any number of components (zero included).
func matchGlob(pat, p string) bool {
	return matchParts(strings.Split(pat, "/"), strings.Split(p, "/"))
}

func matchParts(pat, p []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(p); i++ {
				if matchParts(pat[1:], p[i:]) {
					return true
				}
			}
			return false
		}
		if len(p) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], p[0]); !ok {
			return false
		}
		pat, p = pat[1:], p[1:]
	}
	return len(p) == 0
}

// under is p relative to root (both workdir-relative, slash-separated).
func under(root, p string) string {
	if root == "." {
		return p
	}
	return strings.TrimPrefix(p, root+"/")
}
