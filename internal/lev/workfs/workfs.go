// Package workfs confines lev's file tools to a run's workdir and lets reads (never
// writes) leave it only through the read-path fence. Every decision is made on the
// symlink-resolved real path, and made again on the descriptor the tool acts on (its
// kernel path, its device and inode, and those of every directory above it), so a symlink
// swapped in between the check and the open cannot widen it. Writes reach their file only
// through directory descriptors so checked (write_linux.go), never by name.
//
// It owns that confinement for lev's file tools and the write cap (MaxWriteBytes). It
// must not decide on a path as written, must never let a write leave the workdir, and
// must never let a descriptor it cannot place through.
package workfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/lev/readpaths"
)

// Refusal codes.
const (
	CodeOutside       = "outside-workdir"       // read outside, nothing declared covers it
	CodeNotGranted    = "not-granted"           // declared, but the config does not grant it
	CodeWriteOutside  = "write-outside-workdir" // writes never leave the workdir
	CodeBlueprintSeed = "blueprint-seed-escape" // a blueprint: seed outside the blueprint dir
	CodeLevState      = "lev-state"             // lev's own home, token, keys, config or records
)

// Protector knows lev's own state (levstate.State): no file tool reads or writes it, by
// any name (a path under it, or a hard link to one of its files).
type Protector interface {
	Covers(real string) (string, bool)
	CoversFile(fi os.FileInfo) (string, bool)
	// GrantableRead: a protected path a declared and granted [read_paths] entry may
	// open for reading (lev's run records, nothing else).
	GrantableRead(real string) bool
}

// Refusal is a fence or confinement refusal. Its message is what the model and the run
// record see.
type Refusal struct {
	Code  string
	Path  string // as given
	Real  string // resolved, when known
	Entry string // the declared entry involved, for CodeNotGranted
	Msg   string
}

func (r *Refusal) Error() string { return r.Msg }

// FS is one run's view of the filesystem.
type FS struct {
	Agent   string
	Workdir string // real, absolute
	Fence   *readpaths.Fence
	// Protect, when set, refuses lev's own state for reads and writes, inside the workdir
	// or not, whatever [read_paths] grants.
	Protect Protector
}

// protected refuses real (a resolved path) or fi (the file itself, when known) if it is
// lev's own state.
func (f *FS) protected(tool, given, real string, fi os.FileInfo, read bool) error {
	if f.Protect == nil {
		return nil
	}
	what, ok := f.Protect.Covers(real)
	if !ok && fi != nil {
		what, ok = f.Protect.CoversFile(fi)
		if ok {
			what = "a hard link to " + what
		}
	}
	if !ok {
		return nil
	}
	if read && f.grantedRecord(real) {
		// A read of a run record the user granted by an explicit entry; the record's
		// taint label applies to what the agent reads (taint/labels).
		return nil
	}
	return stateRefusal(tool, given, real, what)
}

// grantedRecord: real lies in lev's run records and a declared, granted [read_paths]
// entry matches it, the one protected place a read may reach.
func (f *FS) grantedRecord(real string) bool {
	if f.Protect == nil || f.Fence == nil || !f.Protect.GrantableRead(real) {
		return false
	}
	m := f.Fence.Match(real)
	return m.Found && m.Granted
}

// DirProtector is a Protector that also knows lev's protected directories by device and
// inode (levstate.State does): a descriptor's ancestors are compared with them, so no
// other name for one of them (a mount made after the set was built) reaches inside.
type DirProtector interface {
	CoversDir(dev, ino uint64) (string, bool)
}

// New resolves workdir to its real path (a symlinked component is followed once, here, so
// every later comparison is between real paths).
func New(agent, workdir string, fence *readpaths.Fence) (*FS, error) {
	abs, err := filepath.Abs(workdir)
	if err != nil {
		return nil, fmt.Errorf("workdir %s: %w", workdir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workdir %s: %w", workdir, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("workdir %s: %w", workdir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("workdir %s: not a directory", workdir)
	}
	if real == "/" {
		return nil, fmt.Errorf("workdir %s is the root directory: the whole filesystem would be inside the fence", workdir)
	}
	return &FS{Agent: agent, Workdir: real, Fence: fence}, nil
}

// Access is a resolved, permitted path.
type Access struct {
	Path    string // as given by the caller
	Abs     string // lexical absolute path
	Real    string // symlink-resolved
	Outside bool   // outside the workdir, allowed by a granted entry
	Entry   string // the granting entry when Outside
}

func (f *FS) abs(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(f.Workdir, p)
}

// ResolveRead checks a read of p: inside the workdir, or outside it and matched by a
// declared and granted entry on its real path.
func (f *FS) ResolveRead(tool, p string) (Access, error) {
	if p == "" {
		return Access{}, fmt.Errorf("%s: empty path", tool)
	}
	a := Access{Path: p, Abs: f.abs(p)}
	real, err := filepath.EvalSymlinks(a.Abs)
	if err != nil {
		// A missing path is fenced where it would be, not where it is written: through a
		// symlinked component (workdir/l -> ~/.ssh) the lexical path is inside the workdir,
		// and answering "no such file" there but "refused" for an existing file would be
		// an oracle for what exists outside the fence. Both the point the walk stopped at
		// and the full would-be path must pass before non-existence is reported.
		stop, would := resolveMissing(a.Abs)
		for _, r := range []string{would, stop} {
			if ferr := f.fence(tool, r, a.Abs, p); ferr != nil {
				return a, ferr
			}
		}
		return a, fmt.Errorf("%s: %s: %w", tool, p, unwrapPathErr(err))
	}
	a.Real = real
	if err := f.fence(tool, real, a.Abs, p); err != nil {
		return a, err
	}
	if !fspath.Within(f.Workdir, real) {
		a.Outside = true
		a.Entry = f.Fence.Match(real).Entry.Raw
	}
	return a, nil
}

// maxLinks bounds symlink expansion in resolveMissing, as the kernel's ELOOP does.
const maxLinks = 255

// resolveMissing resolves an absolute path that EvalSymlinks could not, following every
// symlink (dangling ones included) as far as the filesystem goes. stop is the real path
// where the walk ended: the first component that does not exist (or cannot be looked
// up, or is not a directory yet has components after it). would is stop with the
// remaining components appended lexically: where the path would be if it existed.
func resolveMissing(abs string) (stop, would string) {
	resolved := "/"
	rest := strings.Split(abs, "/")
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			// resolved is already real, so its parent is the kernel's "..".
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return next, filepath.Join(append([]string{next}, rest...)...)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			links++
			target, err := os.Readlink(next)
			if err != nil || links > maxLinks {
				return next, filepath.Join(append([]string{next}, rest...)...)
			}
			if filepath.IsAbs(target) {
				resolved = "/"
			}
			rest = append(strings.Split(target, "/"), rest...)
			continue
		}
		if !fi.IsDir() && hasComponents(rest) {
			// The kernel stops here with ENOTDIR; what follows names nothing.
			return next, filepath.Join(append([]string{next}, rest...)...)
		}
		resolved = next
	}
	return resolved, resolved
}

func hasComponents(parts []string) bool {
	for _, p := range parts {
		if p != "" && p != "." {
			return true
		}
	}
	return false
}

// fence decides a real path; abs is the lexical path, for the message.
func (f *FS) fence(tool, real, abs, given string) error {
	if err := f.protected(tool, given, real, nil, true); err != nil {
		return err
	}
	if fspath.Within(f.Workdir, real) {
		return nil
	}
	what := given
	if real != abs {
		what = fmt.Sprintf("%s (resolves to %s)", given, real)
	} else if given != real {
		what = fmt.Sprintf("%s (%s)", given, real)
	}
	var m readpaths.Match
	if f.Fence != nil {
		m = f.Fence.Match(real)
	}
	switch {
	case m.Found && m.Granted:
		return nil
	case m.Found:
		return &Refusal{Code: CodeNotGranted, Path: given, Real: real, Entry: m.Entry.Raw,
			Msg: fmt.Sprintf("%s: refused: %s is outside the workdir; [read_paths] declares %s but your config does not grant it; add to your config.toml: %s",
				tool, what, m.Entry.Raw, readpaths.GrantLine(f.Agent, []string{m.Entry.Raw}))}
	}
	return &Refusal{Code: CodeOutside, Path: given, Real: real,
		Msg: fmt.Sprintf("%s: refused: %s is outside the workdir and no declared [read_paths] entry covers it", tool, what)}
}

// ResolveWrite checks a write of p: the lexical path and the real path of its deepest
// existing ancestor (and of the file itself, if it is a symlink) must be in the workdir.
// No grant applies.
func (f *FS) ResolveWrite(tool, p string) (Access, error) {
	if p == "" {
		return Access{}, fmt.Errorf("%s: empty path", tool)
	}
	a := Access{Path: p, Abs: f.abs(p)}
	refuse := func(real string) error {
		what := p
		if real != a.Abs {
			what = fmt.Sprintf("%s (resolves to %s)", p, real)
		}
		return &Refusal{Code: CodeWriteOutside, Path: p, Real: real,
			Msg: fmt.Sprintf("%s: refused: %s is outside the workdir; writes never leave the workdir, whatever [read_paths] grants", tool, what)}
	}
	if !fspath.Within(f.Workdir, a.Abs) || a.Abs == f.Workdir {
		return a, refuse(a.Abs)
	}
	// Walk up to the deepest existing ancestor and resolve it.
	existing, rest := a.Abs, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		// A dangling symlink: where it would land is not known yet, so it is not followed.
		return a, &Refusal{Code: CodeWriteOutside, Path: p, Real: existing,
			Msg: fmt.Sprintf("%s: refused: %s goes through a symlink that does not resolve; writes never follow one out of the workdir", tool, p)}
	}
	a.Real = filepath.Join(real, rest)
	if !fspath.Within(f.Workdir, a.Real) || a.Real == f.Workdir {
		return a, refuse(a.Real)
	}
	if err := f.protectedWrite(tool, a); err != nil {
		return a, err
	}
	return a, nil
}

// protectedWrite refuses a write to lev's state: by path, or by writing through a hard
// link (made by a shell, say) to one of lev's files.
func (f *FS) protectedWrite(tool string, a Access) error {
	fi, err := os.Lstat(a.Real)
	if err != nil {
		fi = nil
	}
	return f.protected(tool, a.Path, a.Real, fi, false)
}

// ReadFile reads an access returned by ResolveRead, re-checking the opened descriptor's
// real path, and refusing anything but a regular file. At most max bytes are returned;
// truncated reports whether the file was longer.
func (f *FS) ReadFile(tool string, a Access, max int64) (data []byte, truncated bool, err error) {
	return f.ReadFileAt(tool, a, 0, max)
}

// ReadFileAt is ReadFile starting at byte offset. The buffer is bounded by max (never by
// offset+max, which a model-chosen offset could overflow or inflate to the file's size),
// and an offset past the end of the file is an error rather than an empty read, so a
// mistyped offset is visible.
func (f *FS) ReadFileAt(tool string, a Access, offset, max int64) (data []byte, truncated bool, err error) {
	if offset < 0 {
		return nil, false, fmt.Errorf("%s: %s: offset %d is negative", tool, a.Path, offset)
	}
	if max < 0 {
		max = 0
	}
	file, err := f.open(tool, a)
	if err != nil {
		return nil, false, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return nil, false, err
	}
	if err := fileModeRegular(st.Mode()); err != nil {
		var nr errNotRegular
		if errors.As(err, &nr) {
			return nil, false, notRegular(tool, a.Path, nr)
		}
		return nil, false, err
	}
	if offset > st.Size() {
		return nil, false, fmt.Errorf("%s: %s: offset %d is past the end of the file (%d bytes)", tool, a.Path, offset, st.Size())
	}
	// One byte more than max tells a truncated file from one that is exactly max long.
	buf := make([]byte, min(st.Size()-offset, max)+1)
	n, err := readFullAt(file, buf, offset)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %s: %w", tool, a.Path, err)
	}
	if int64(n) > max {
		return buf[:max], true, nil
	}
	return buf[:n], false, nil
}

// ReadDir lists an access returned by ResolveRead: at most max entries (in directory
// order), more reporting that the directory holds others. Only max+1 entries are ever
// read, so a directory of millions costs no more than one of max.
func (f *FS) ReadDir(tool string, a Access, max int) (ents []fs.DirEntry, more bool, err error) {
	file, err := f.open(tool, a)
	if err != nil {
		return nil, false, err
	}
	defer file.Close()
	if st, err := file.Stat(); err != nil {
		return nil, false, err
	} else if !st.IsDir() {
		return nil, false, fmt.Errorf("%s: %s: not a directory", tool, a.Path)
	}
	ents, err = file.ReadDir(max + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("%s: %s: %w", tool, a.Path, err)
	}
	if len(ents) > max {
		return ents[:max], true, nil
	}
	return ents, false, nil
}

// open opens read-only without blocking on a FIFO, then checks the descriptor's real path
// against the same rules: this closes the gap between resolving and opening.
func (f *FS) open(tool string, a Access) (*os.File, error) {
	// Regular files and directories only: opening a device can act on it, and a FIFO or
	// socket is somebody else's channel, not a file.
	if st, err := os.Lstat(a.Real); err == nil {
		if err := regularOrDir(tool, a.Path, st.Mode()); err != nil {
			return nil, err
		}
	}
	file, err := openNoBlock(a.Real)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", tool, a.Path, unwrapPathErr(err))
	}
	if st, err := file.Stat(); err != nil {
		file.Close()
		return nil, err
	} else if err := regularOrDir(tool, a.Path, st.Mode()); err != nil {
		file.Close()
		return nil, err
	}
	// The descriptor is what the tool reads, so it is what is decided: its real path
	// (the kernel's), its inode (a hard link to one of lev's files) and, for a directory,
	// the device and inode of every directory above it. A descriptor whose place cannot
	// be told is refused (errFDUnknown), never waved through.
	real, err := fdReal(file)
	if err != nil && !errors.Is(err, errFDUnsupported) {
		file.Close()
		return nil, &Refusal{Code: CodeOutside, Path: a.Path,
			Msg: fmt.Sprintf("%s: refused: %s: %v", tool, a.Path, err)}
	}
	if err == nil {
		if err := f.fence(tool, real, a.Abs, a.Path); err != nil {
			file.Close()
			return nil, err
		}
	} else {
		real = a.Real
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, err
	}
	if err := f.protected(tool, a.Path, real, fi, true); err != nil {
		file.Close()
		return nil, err
	}
	if !f.grantedRecord(real) {
		var check error
		if fi.IsDir() {
			check = f.ancestorsClear(tool, a.Path, file)
		} else {
			check = f.fileAncestorsClear(tool, a.Path, file, real)
		}
		if check != nil {
			file.Close()
			return nil, check
		}
	}
	return file, nil
}

func regularOrDir(tool, path string, m fs.FileMode) error {
	if m.IsDir() || m&fs.ModeSymlink != 0 {
		// A symlink here was swapped in after resolving: the open follows it and the
		// descriptor's real path and type are checked after.
		return nil
	}
	var nr errNotRegular
	if err := fileModeRegular(m); errors.As(err, &nr) {
		return notRegular(tool, path, nr)
	} else if err != nil {
		return fmt.Errorf("%s: %s: %w", tool, path, err)
	}
	return nil
}

var errEscape = errors.New("path escapes the workdir")

// CodeNotRegular refuses a file tool on anything but a regular file or a directory: a
// FIFO or socket would block the call (or talk to whoever listens), a device is not a
// file at all.
const CodeNotRegular = "not-a-regular-file"

// errNotRegular says what a path is instead of a regular file.
type errNotRegular struct{ what string }

func (e errNotRegular) Error() string { return e.what }

// fileModeRegular refuses anything but a regular file, by its fs.FileMode.
func fileModeRegular(m fs.FileMode) error {
	switch {
	case m.IsRegular():
		return nil
	case m&fs.ModeNamedPipe != 0:
		return errNotRegular{"a named pipe (FIFO)"}
	case m&fs.ModeSocket != 0:
		return errNotRegular{"a socket"}
	case m&fs.ModeDevice != 0:
		return errNotRegular{"a device"}
	case m.IsDir():
		return errNotRegular{"a directory"}
	case m&fs.ModeSymlink != 0:
		return errEscape
	}
	return errNotRegular{"not a regular file"}
}

func notRegular(tool, path string, e errNotRegular) *Refusal {
	return &Refusal{Code: CodeNotRegular, Path: path,
		Msg: fmt.Sprintf("%s: refused: %s is %s, not a regular file or directory; file tools act on regular files and directories only", tool, path, e.what)}
}

// readFullAt fills buf from offset with pread, so the file position (and the size of the
// skipped prefix) never matters; a short read at end of file is not an error.
func readFullAt(file *os.File, buf []byte, offset int64) (int, error) {
	n, err := file.ReadAt(buf, offset)
	if errors.Is(err, io.EOF) {
		return n, nil
	}
	return n, err
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
